"""Files: the workspace tree and Unity Catalog volumes (`routes`, kept by `backend`)."""
