"""The semantic cache: answers kept per tenant by meaning (vectors in Redis), the rules for
what may be cached, its Lua scripts, and its offline evaluation."""
