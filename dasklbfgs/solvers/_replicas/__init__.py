"""What Downpour and the peer methods share: the replicas' rows and batches, argument
checks, in-process calls to actors on the replica's own worker, and the coordinator's
watch loop."""
