"""The engines behind one interface (`engine.Engine`): vLLM (the only vLLM import), the
transformers continuous-batching engine, the fake engine for tests, and engine options."""
