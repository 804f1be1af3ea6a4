"""Where a turn runs: the semantic router (small vs reasoning pool), the endpoint picker
(prefix cache, KV cache and queue aware) over the workers' board, and their evaluation."""
