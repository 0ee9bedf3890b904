"""Several candidates a round: screening on train, their refs, the archive of partial winners."""
