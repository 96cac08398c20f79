"""How the client reaches the controller: the Ray actor call today, and what its failures mean to a user."""
