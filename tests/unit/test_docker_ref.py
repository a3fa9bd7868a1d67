from __future__ import annotations

import pytest

from air_runtime._docker_ref import DockerRefError, normalize_docker_ref, parse_docker_ref

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("reference", "normal"),
    [
        ("ubuntu", "docker.io/library/ubuntu:latest"),
        ("ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
        ("library/ubuntu:latest", "docker.io/library/ubuntu:latest"),
        ("myorg/repo:tag", "docker.io/myorg/repo:tag"),
        ("myorg/repo", "docker.io/myorg/repo:latest"),
        ("docker.io/myorg/repo:1.0", "docker.io/myorg/repo:1.0"),
        # A named registry is kept as written, as the CLI does (image_client.go
        # normalizeDockerImageURL): registrations are looked up by this string.
        ("index.docker.io/myorg/repo:1.0", "index.docker.io/myorg/repo:1.0"),
        ("docker.io/ubuntu", "docker.io/ubuntu:latest"),
        (f"myorg/repo:tag@{DIGEST}", f"docker.io/myorg/repo@{DIGEST}"),
        (f"ubuntu@{DIGEST}", f"docker.io/library/ubuntu@{DIGEST}"),
        ("  myorg/repo:tag  ", "docker.io/myorg/repo:tag"),
        (
            "pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime",
            "docker.io/pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime",
        ),
    ],
)
def test_normal_form(reference: str, normal: str) -> None:
    assert normalize_docker_ref(reference) == normal
    # the normal form is a fixed point
    assert normalize_docker_ref(normal) == normal


@pytest.mark.parametrize(
    ("reference", "registry"),
    [
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/repo:1", "Amazon ECR"),
        ("gcr.io/project/repo:1", "Google Container Registry"),
        ("us-docker.pkg.dev/project/repo/image:1", "Google Artifact Registry"),
        ("ghcr.io/org/repo:1", "GitHub Container Registry"),
        ("registry.example.com/org/repo:1", "registry.example.com"),
        ("localhost:5000/repo:1", "localhost:5000"),
    ],
)
def test_other_registries_are_rejected(reference: str, registry: str) -> None:
    with pytest.raises(DockerRefError) as info:
        parse_docker_ref(reference)
    assert registry in info.value.message
    assert "Docker Hub is required" in info.value.message
    assert "docker.io/<org>/<repo>:<tag>" in info.value.hint


@pytest.mark.parametrize(
    "reference",
    [
        "",
        "   ",
        "https://docker.io/a/b",
        "My/Repo:1",
        "a/b:bad tag",
        "a/b@sha256:xyz",
        "a//b",
        "a/b:",
    ],
)
def test_malformed_references(reference: str) -> None:
    with pytest.raises(DockerRefError):
        parse_docker_ref(reference)


def test_parsed_parts() -> None:
    ref = parse_docker_ref("myorg/repo:1.0")
    assert (ref.repository, ref.tag, ref.digest) == ("myorg/repo", "1.0", None)
    assert str(ref) == "docker.io/myorg/repo:1.0"


@pytest.mark.parametrize(
    ("digest", "valid"),
    [
        (DIGEST, True),
        ("sha512:" + "b" * 128, True),
        ("sha256:" + "A" * 64, False),  # the OCI grammar's hex is lower case
        ("sha256:" + "a" * 32, False),
        ("md5:" + "a" * 32, False),
        ("sha256:xyz", False),
    ],
)
def test_docker_hub_images_and_push_sources_read_digests_by_one_grammar(
    digest: str, valid: bool
) -> None:
    """The workload's Docker Hub image and ``airo images push``'s source share one parser."""
    from air_runtime._errors import ConfigurationError
    from air_runtime.images import parse_source_image

    reference = f"myorg/repo@{digest}"
    if valid:
        assert parse_docker_ref(reference).digest == digest
        assert parse_source_image(reference).digest == digest
    else:
        with pytest.raises(DockerRefError, match="malformed digest"):
            parse_docker_ref(reference)
        with pytest.raises(ConfigurationError, match="malformed digest"):
            parse_source_image(reference)
