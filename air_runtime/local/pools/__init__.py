"""GPU pools: their configuration and usage (`routes`) and the accelerators attempts hold
(`backend`)."""
