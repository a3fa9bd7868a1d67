"""The token service of the Artifact Registry stand-in (`routes`; the signer is `backend`)."""
