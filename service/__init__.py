"""InferPool's HTTP front end. Talks to the engine only through ``engine.EngineClient``."""
