"""harnessopt: improve LLM agent skills and harnesses with reviewable, gated git commits."""

__version__ = "0.1.0"
