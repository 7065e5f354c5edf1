"""Test doubles: in-process stand-ins for external services (model servers, ...)."""
