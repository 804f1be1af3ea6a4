"""Who gets in: tiers, token buckets per tenant, the pools' load and overload refusals."""
