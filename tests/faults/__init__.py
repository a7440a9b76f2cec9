"""The fault suite: real servers paused, killed and restarted under a workload (``make faults``)."""
