"""Usage (serverless budget) policies (`routes`, kept by `backend`)."""
