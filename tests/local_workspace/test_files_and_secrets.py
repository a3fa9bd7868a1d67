"""Workspace files, volume files and secrets."""

from __future__ import annotations

import httpx

HOME = "/Workspace/Users/local-user@example.com/files-test"


def test_import_file_needs_its_parent_then_conflicts(api: httpx.Client) -> None:
    url = f"/api/2.0/workspace-files/import-file{HOME}/a/command.sh"
    missing = api.post(url, content=b"echo 1")
    assert missing.status_code == 404
    assert missing.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    assert api.post("/api/2.0/workspace/mkdirs", json={"path": f"{HOME}/a"}).status_code == 200
    assert api.post("/api/2.0/workspace/mkdirs", json={"path": f"{HOME}/a"}).status_code == 200
    assert api.post(url, content=b"echo 1").status_code == 200
    conflict = api.post(url, content=b"echo 2")
    assert conflict.status_code == 409
    assert api.post(url, params={"overwrite": "true"}, content=b"echo 2").status_code == 200
    exported = api.get(
        "/api/2.0/workspace/export",
        params={"path": f"{HOME}/a/command.sh", "direct_download": "true"},
    )
    assert exported.content == b"echo 2"
    encoded = api.get("/api/2.0/workspace/export", params={"path": f"{HOME}/a/command.sh"}).json()
    assert encoded["content"] == "ZWNobyAy"


def test_get_status_list_and_delete(api: httpx.Client) -> None:
    api.post("/api/2.0/workspace/mkdirs", json={"path": f"{HOME}/b/c"}).raise_for_status()
    api.post(f"/api/2.0/workspace-files/import-file{HOME}/b/f.txt", content=b"x").raise_for_status()
    status = api.get("/api/2.0/workspace/get-status", params={"path": f"{HOME}/b"}).json()
    assert status["object_type"] == "DIRECTORY" and status["path"] == f"{HOME}/b"
    file_status = api.get(
        "/api/2.0/workspace/get-status", params={"path": f"{HOME}/b/f.txt"}
    ).json()
    assert file_status["object_type"] == "FILE"
    # /Users/... and /Workspace/Users/... are the same object
    short = api.get(
        "/api/2.0/workspace/get-status",
        params={"path": "/Users/local-user@example.com/files-test/b"},
    )
    assert short.status_code == 200
    listing = api.get("/api/2.0/workspace/list", params={"path": f"{HOME}/b"}).json()["objects"]
    assert {(o["path"], o["object_type"]) for o in listing} == {
        (f"{HOME}/b/c", "DIRECTORY"),
        (f"{HOME}/b/f.txt", "FILE"),
    }
    not_empty = api.post("/api/2.0/workspace/delete", json={"path": f"{HOME}/b"})
    assert not_empty.status_code == 400 and not_empty.json()["error_code"] == "DIRECTORY_NOT_EMPTY"
    assert (
        api.post(
            "/api/2.0/workspace/delete", json={"path": f"{HOME}/b", "recursive": True}
        ).status_code
        == 200
    )
    gone = api.get("/api/2.0/workspace/get-status", params={"path": f"{HOME}/b"})
    assert gone.status_code == 404 and gone.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    assert api.post("/api/2.0/workspace/delete", json={"path": f"{HOME}/b"}).status_code == 404


def test_paths_cannot_escape(api: httpx.Client) -> None:
    response = api.get("/api/2.0/workspace/get-status", params={"path": "/Workspace/../../etc"})
    assert response.status_code == 400
    assert api.get("/api/2.0/workspace/get-status", params={"path": "relative"}).status_code == 400


def test_volume_files(api: httpx.Client) -> None:
    url = "/api/2.0/fs/files/Volumes/main/default/code/exp/code_source.tar.gz"
    assert api.put(url, params={"overwrite": "true"}, content=b"tar").status_code == 204
    assert api.put(url, content=b"tar").status_code == 409
    assert api.get(url).content == b"tar"
    assert api.put("/api/2.0/fs/files/Volumes/x", content=b"x").status_code == 400


def test_secrets(api: httpx.Client) -> None:
    assert api.post("/api/2.0/secrets/scopes/create", json={"scope": "team"}).json() == {}
    again = api.post("/api/2.0/secrets/scopes/create", json={"scope": "team"})
    assert again.status_code == 400 and again.json()["error_code"] == "RESOURCE_ALREADY_EXISTS"
    assert {"name": "team", "backend_type": "DATABRICKS"} in api.get(
        "/api/2.0/secrets/scopes/list"
    ).json()["scopes"]
    missing = api.post(
        "/api/2.0/secrets/put", json={"scope": "nope", "key": "k", "string_value": "v"}
    )
    assert missing.status_code == 404 and missing.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    bad_key = api.post(
        "/api/2.0/secrets/put", json={"scope": "team", "key": "a/b", "string_value": "v"}
    )
    assert bad_key.status_code == 400
    assert (
        api.post(
            "/api/2.0/secrets/put",
            json={"scope": "team", "key": "hf_token", "string_value": "very-secret"},
        ).status_code
        == 200
    )
    listing = api.get("/api/2.0/secrets/list", params={"scope": "team"})
    assert [s["key"] for s in listing.json()["secrets"]] == ["hf_token"]
    assert "very-secret" not in listing.text
    assert api.get("/api/2.0/secrets/list", params={"scope": "nope"}).status_code == 404
    assert (
        api.post("/api/2.0/secrets/delete", json={"scope": "team", "key": "hf_token"}).status_code
        == 200
    )
    assert (
        api.post("/api/2.0/secrets/delete", json={"scope": "team", "key": "hf_token"}).status_code
        == 404
    )
    assert api.get("/api/2.0/secrets/list", params={"scope": "team"}).json()["secrets"] == []
