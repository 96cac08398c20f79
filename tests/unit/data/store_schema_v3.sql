BEGIN TRANSACTION;
CREATE TABLE events (
	id INTEGER NOT NULL, 
	time DOUBLE NOT NULL, 
	job_id VARCHAR(255), 
	kind VARCHAR(32) NOT NULL, 
	message TEXT NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "events" VALUES(1,1000.0,'research-hello-gang-1','submitted','submitted event');
INSERT INTO "events" VALUES(2,1001.0,'research-hello-gang-1','succeeded','succeeded event');
INSERT INTO "events" VALUES(3,1002.0,'research-hello-gang-2','submitted','submitted event');
INSERT INTO "events" VALUES(4,1003.0,'research-hello-gang-2','admitted','admitted event');
INSERT INTO "events" VALUES(5,1004.0,'research-hello-gang-3','submitted','submitted event');
INSERT INTO "events" VALUES(6,1005.0,'research-hello-gang-4','submitted','submitted event');
INSERT INTO "events" VALUES(7,1006.0,'research-hello-gang-4','preempted','preempted event');
CREATE TABLE jobs (
	id VARCHAR(255) NOT NULL, 
	tenant VARCHAR(253) NOT NULL, 
	name VARCHAR(253) NOT NULL, 
	kind VARCHAR(32) NOT NULL, 
	user VARCHAR(253) NOT NULL, 
	spec JSON NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	priority INTEGER NOT NULL, 
	submit_time DOUBLE NOT NULL, 
	seq INTEGER NOT NULL, 
	start_time DOUBLE, 
	end_time DOUBLE, 
	attempts INTEGER NOT NULL, 
	allocation JSON, 
	reason TEXT NOT NULL, 
	submission_id VARCHAR(255), 
	driver VARCHAR(16), 
	attained_gpu_s DOUBLE NOT NULL, 
	gpus DOUBLE NOT NULL, 
	message TEXT, 
	checkpoint_time DOUBLE, 
	correction JSON, 
	PRIMARY KEY (id)
);
INSERT INTO "jobs" VALUES('research-hello-gang-1','research','hello-gang','Task','alice','{"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": "hello-gang", "tenant": "research", "labels": {}}, "spec": {"workers": 2, "resources": {"cpu": "500m", "memory": "256Mi", "gpu": "0", "rdma": null, "custom": {}}, "placement": "auto", "node_selector": {}, "priority": null, "max_runtime": "5m", "max_failures": 0, "env": {}, "runtime_env": {}, "command": "echo \"worker $RANK of $WORLD_SIZE on $(hostname); master $MASTER_ADDR:$MASTER_PORT\""}}','SUCCEEDED',0,1001.0,1,1001.5,1010.0,1,NULL,'','cuberay-research-hello-gang-1','launcher',0.0,0.0,'ok',NULL,NULL);
INSERT INTO "jobs" VALUES('research-hello-gang-2','research','hello-gang','Task','alice','{"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": "hello-gang", "tenant": "research", "labels": {}}, "spec": {"workers": 2, "resources": {"cpu": "500m", "memory": "256Mi", "gpu": "0", "rdma": null, "custom": {}}, "placement": "auto", "node_selector": {}, "priority": null, "max_runtime": "5m", "max_failures": 0, "env": {}, "runtime_env": {}, "command": "echo \"worker $RANK of $WORLD_SIZE on $(hostname); master $MASTER_ADDR:$MASTER_PORT\""}}','RUNNING',0,1002.0,2,1003.0,NULL,1,'[{"node_id": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}]','','cuberay-research-hello-gang-2','launcher',0.0,0.0,NULL,1004.0,NULL);
INSERT INTO "jobs" VALUES('research-hello-gang-3','research','hello-gang','Task','alice','{"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": "hello-gang", "tenant": "research", "labels": {}}, "spec": {"workers": 2, "resources": {"cpu": "500m", "memory": "256Mi", "gpu": "0", "rdma": null, "custom": {}}, "placement": "auto", "node_selector": {}, "priority": null, "max_runtime": "5m", "max_failures": 0, "env": {}, "runtime_env": {}, "command": "echo \"worker $RANK of $WORLD_SIZE on $(hostname); master $MASTER_ADDR:$MASTER_PORT\""}}','QUEUED',0,1003.0,3,NULL,NULL,0,NULL,'waiting for the next admission cycle',NULL,'launcher',0.0,0.0,NULL,NULL,NULL);
INSERT INTO "jobs" VALUES('research-hello-gang-4','research','hello-gang','Task','alice','{"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": "hello-gang", "tenant": "research", "labels": {}}, "spec": {"workers": 2, "resources": {"cpu": "500m", "memory": "256Mi", "gpu": "0", "rdma": null, "custom": {}}, "placement": "auto", "node_selector": {}, "priority": null, "max_runtime": "5m", "max_failures": 0, "env": {}, "runtime_env": {}, "command": "echo \"worker $RANK of $WORLD_SIZE on $(hostname); master $MASTER_ADDR:$MASTER_PORT\""}}','PREEMPTED',0,1004.0,4,NULL,NULL,1,NULL,'preempted by a higher priority job',NULL,'launcher',0.0,0.0,NULL,NULL,NULL);
CREATE TABLE schema_version (
	id INTEGER NOT NULL, 
	version INTEGER NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "schema_version" VALUES(1,3);
CREATE TABLE serve_changes (
	id INTEGER NOT NULL, 
	time DOUBLE NOT NULL, 
	app VARCHAR(255) NOT NULL, 
	user VARCHAR(253) NOT NULL, 
	action VARCHAR(32) NOT NULL, 
	weights JSON NOT NULL, 
	note TEXT NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "serve_changes" VALUES(1,1.79604625258462381361e+09,'research-web-1','alice','deploy','{"v1": 100.0}','first');
CREATE TABLE tenants (
	name VARCHAR(253) NOT NULL, 
	spec JSON NOT NULL, 
	updated_at DOUBLE NOT NULL, 
	PRIMARY KEY (name)
);
INSERT INTO "tenants" VALUES('research','{"name": "research", "members": ["alice"]}',1.79604625254717707632e+09);
CREATE TABLE usage_samples (
	job_id VARCHAR(255) NOT NULL, 
	attempt INTEGER NOT NULL, 
	worker INTEGER NOT NULL, 
	tenant VARCHAR(253) NOT NULL, 
	name VARCHAR(253) NOT NULL, 
	time DOUBLE NOT NULL, 
	cpu DOUBLE NOT NULL, 
	memory_gib DOUBLE NOT NULL, 
	PRIMARY KEY (job_id, attempt, worker)
);
INSERT INTO "usage_samples" VALUES('research-hello-gang-1',1,0,'research','hello-gang',1010.0,0.4,0.1);
CREATE INDEX ix_jobs_tenant_name ON jobs (tenant, name);
CREATE INDEX ix_jobs_state ON jobs (state);
CREATE INDEX ix_usage_tenant_name ON usage_samples (tenant, name);
CREATE INDEX ix_events_job_id ON events (job_id);
CREATE INDEX ix_serve_changes_app ON serve_changes (app);
COMMIT;
