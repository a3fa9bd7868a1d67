"""Images: Docker image registrations (`routes`, kept by `backend`) and the Unity Catalog
images of submitted runs, looked up in the paired Artifact Registry (`catalog_images`)."""
