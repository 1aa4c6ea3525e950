"""What Downpour and the peer methods share: the replica task's rows, batches and tallies,
argument checks, in-process calls to actors on the replica's own worker, the replicas'
mailboxes, and the
coordinator's base class and watch loop."""
