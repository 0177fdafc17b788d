"""agentbox-controller: keeps AI coding agents working through their subscription usage limits."""

__version__ = "0.1.0"
