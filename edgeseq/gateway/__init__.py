"""Many devices, one model: `edgeseq serve`'s gateway over NATS JetStream.

`broker` runs a local nats-server (JetStream, MQTT, the partition mapping); `wire` defines the
messages and stored state; `batcher` advances every ready device in one multi-stream push;
`service` is the gateway (leases, consumers, snapshots, failover); `devices` publishes readings
as devices would (for tests and the load benchmark).
"""
