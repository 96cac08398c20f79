"""A cross-process JAX collective, as a multi-host JAX script runs it: ``python -m cuberay.examples.jax_collective``.

Every worker of a cuberay command gang has ``JAX_COORDINATOR_ADDRESS`` (worker 0's node and a port free
there), ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID``. ``jax.distributed.initialize`` reads the first
itself; the count and id are passed from the environment. Each process puts ``id + 1`` on each of its
devices, one shard of a global array over every process's devices; a jitted sum of it (a cross-process
reduction XLA runs as a collective) is printed by every process with its Ray node. On CPU it goes over gloo.
"""

from __future__ import annotations

import os


def main() -> None:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
                               process_id=int(os.environ["JAX_PROCESS_ID"]))
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    n, me = jax.process_count(), jax.process_index()
    mesh = Mesh(np.array(jax.devices()), ("p",))
    local = [jax.device_put(jnp.full((1,), float(me + 1)), d) for d in jax.local_devices()]
    shards = jax.make_array_from_single_device_arrays((len(jax.devices()),), NamedSharding(mesh, PartitionSpec("p")),
                                                      local)
    total = jax.jit(lambda x: jnp.sum(x), out_shardings=NamedSharding(mesh, PartitionSpec()))(shards)
    value = float(np.asarray(total.addressable_data(0)))
    expected = sum(float(p + 1) * jax.local_device_count() for p in range(n))
    status = "ok" if value == expected else f"WRONG (expected {expected})"
    print(f"jax collective {status} process={me} processes={n} devices={len(jax.devices())} sum={value:g} "
          f"node={os.environ.get('CUBERAY_NODE_ID', '')}", flush=True)
    jax.distributed.shutdown()
    if value != expected:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
