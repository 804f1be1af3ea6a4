"""What every worker shares: consume → handle → produce → commit, dead letters, ids."""
