"""Images on their way into the engine: placeholders in the prompt, pixel tensors from the
blob store, the per-turn image budget and the engine-side image cache."""
