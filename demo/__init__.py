"""The demo of a checkout (`make demo`): not part of the installed package."""
