"""Identity: SCIM `Me` and the OAuth machine-to-machine flow (`routes`), the workspace's
tokens (`backend`) and who is calling (`auth`)."""
