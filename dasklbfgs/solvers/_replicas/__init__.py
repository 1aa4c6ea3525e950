"""What Downpour and the peer methods share: the replica task's rows, batches and tallies,
argument checks, parameter-shard actors and their groups, the wire format, and the
coordinator's base class and watch loop."""
