"""An image of podman's storage as an OCI archive that holds only the layers a node lacks.

``podman save`` writes every layer of an image, and ``ctr images import`` reads, hashes and
stores every layer it is given: for the trainer image (6 GB, torch's layer alone 4.9 GB) each
change to rltrainer's sources cost minutes per node although only its top layers (a few MB)
changed. A node's containerd keeps the layers it imported before under their uncompressed
digests (the image's diffIDs), and ``ctr images import`` of an OCI archive stores the blobs the
archive holds and takes the others from its content store. So this module writes the archive
itself: the manifest and config podman keeps for a built image (its layers referenced
uncompressed, by diffID), and each missing layer rebuilt from podman's overlay storage byte for
byte with the layer's tar-split (how containers/storage reproduces a layer's original tar), its
digest checked.

This reads podman's storage files directly (``images.json``, ``layers.json``, the image's
"big data" files, ``overlay-layers/ID.tar-split.gz``); where any of it is not as expected (another
storage driver, a pulled image whose manifest names compressed layers, a digest that differs)
``LayerArchiveError`` says why and the caller saves the whole image with ``podman save``.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

UNCOMPRESSED_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


class LayerArchiveError(Exception):
    """Podman's storage does not hold the image the way this module reads it."""


@dataclass(frozen=True)
class StoredImage:
    """One image of podman's overlay storage at ``root``: its manifest and config as stored, and
    for each layer digest (diffID) the storage layer that holds it."""

    root: Path
    manifest: bytes
    config: bytes
    layer_ids: dict[str, str]

    @classmethod
    def read(cls, root: Path, image_id: str) -> StoredImage:
        images = {entry["id"]: entry for entry in _json(root / "overlay-images" / "images.json")}
        if image_id not in images:
            raise LayerArchiveError(f"image {image_id[:12]} is not in {root}/overlay-images")
        folder = root / "overlay-images" / image_id
        manifest = (folder / "manifest").read_bytes()
        config = (folder / _big_data_file(f"sha256:{image_id}")).read_bytes()
        layers = json.loads(manifest).get("layers", [])
        if json.loads(manifest).get("mediaType") != OCI_MANIFEST or any(
            layer.get("mediaType") != UNCOMPRESSED_LAYER for layer in layers
        ):
            raise LayerArchiveError(f"image {image_id[:12]}'s manifest names compressed or non-OCI layers")
        by_digest = {
            entry["diff-digest"]: entry["id"]
            for entry in _json(root / "overlay-layers" / "layers.json")
            if entry.get("diff-digest")
        }
        missing = [layer["digest"] for layer in layers if layer["digest"] not in by_digest]
        if missing:
            raise LayerArchiveError(f"layers {missing} of image {image_id[:12]} are not in {root}")
        return cls(root, manifest, config, {layer["digest"]: by_digest[layer["digest"]] for layer in layers})

    def write_archive(self, archive: Path, name: str, present: set[str]) -> int:
        """An OCI archive of this image named ``name`` (``ctr`` reads ``io.containerd.image.name``)
        without the layers whose digests are in ``present``; the bytes of layers written."""
        manifest_digest = _digest(self.manifest)
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": manifest_digest,
                    "size": len(self.manifest),
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name,
                    },
                }
            ],
        }
        written = 0
        staging = archive.with_suffix(".layers")
        staging.mkdir(parents=True, exist_ok=True)
        try:
            with tarfile.open(archive, "w") as tar:
                _add_bytes(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
                _add_bytes(tar, "index.json", json.dumps(index).encode())
                _add_bytes(tar, _blob_path(manifest_digest), self.manifest)
                _add_bytes(tar, _blob_path(_digest(self.config)), self.config)
                for digest, layer_id in self.layer_ids.items():
                    if digest in present:
                        continue
                    layer = staging / digest.removeprefix("sha256:")
                    self._rebuild_layer(layer_id, digest, layer)
                    tar.add(layer, arcname=_blob_path(digest))
                    written += layer.stat().st_size
                    layer.unlink()
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return written

    def _rebuild_layer(self, layer_id: str, digest: str, out_path: Path) -> None:
        """The layer's tar as podman received it: the tar-split's raw segments (headers, padding)
        with each file's bytes from the layer's diff folder, checked against ``digest``."""
        diff = self.root / "overlay" / layer_id / "diff"
        tar_split = self.root / "overlay-layers" / f"{layer_id}.tar-split.gz"
        if not tar_split.exists() or not diff.is_dir():
            raise LayerArchiveError(f"layer {layer_id[:12]} has no tar-split or diff folder")
        sha = hashlib.sha256()
        with gzip.open(tar_split, "rt") as entries, out_path.open("wb") as out:
            for line in entries:
                entry = json.loads(line)
                if entry["type"] == 2:  # a raw segment: headers and padding
                    chunk = base64.b64decode(entry["payload"])
                    sha.update(chunk)
                    out.write(chunk)
                elif entry.get("size"):  # a file's contents
                    name = (
                        base64.b64decode(entry["name_raw"])
                        if entry.get("name_raw")
                        else entry["name"].encode()
                    )
                    with (diff / name.decode("utf-8", "surrogateescape")).open("rb") as source:
                        remaining = entry["size"]
                        while remaining:
                            chunk = source.read(min(remaining, 1 << 20))
                            if not chunk:
                                raise LayerArchiveError(
                                    f"layer {layer_id[:12]}: {name!r} is shorter than recorded"
                                )
                            sha.update(chunk)
                            out.write(chunk)
                            remaining -= len(chunk)
        if f"sha256:{sha.hexdigest()}" != digest:
            raise LayerArchiveError(f"layer {layer_id[:12]} rebuilt to another digest than {digest}")


def _json(path: Path) -> list[dict]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise LayerArchiveError(f"cannot read {path}: {err}") from err


def _big_data_file(key: str) -> str:
    """containers/storage's file name for an image's "big data" item ``key``."""
    return "=" + base64.b64encode(key.encode()).decode()


def _digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _blob_path(digest: str) -> str:
    return "blobs/sha256/" + digest.removeprefix("sha256:")


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
