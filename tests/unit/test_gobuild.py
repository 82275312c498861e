"""The Go toolchain fetch's checks, without the network: the pinned SHA-256, paths that
would leave the folder, and the executables' mode (geoslo.live._gobuild)."""

from __future__ import annotations

import hashlib
import os
import zipfile

import pytest

from geoslo.live._gobuild import _download, _unzip_toolchain

PREFIX = "golang.org/toolchain@v0.0.1-go1.25.4.linux-amd64/"


def make_zip(path, names) -> None:
    with zipfile.ZipFile(path, "w") as zipped:
        for name in names:
            zipped.writestr(name, b"#!/bin/sh\n")


def test_a_download_is_kept_only_with_the_pinned_sha256(tmp_path):
    source = tmp_path / "source.bin"
    source.write_bytes(b"toolchain bytes")
    good = hashlib.sha256(b"toolchain bytes").hexdigest()
    _download(source.as_uri(), tmp_path / "ok.bin", good)
    assert (tmp_path / "ok.bin").read_bytes() == b"toolchain bytes"
    with pytest.raises(OSError, match="not the pinned"):
        _download(source.as_uri(), tmp_path / "bad.bin", "0" * 64)


@pytest.mark.parametrize("name", ["../evil", "bin/../../evil"])
def test_a_path_leaving_the_folder_is_refused(tmp_path, name):
    archive = tmp_path / "t.zip"
    make_zip(archive, [PREFIX + "bin/go", PREFIX + name])
    with pytest.raises(OSError, match="unsafe path"):
        _unzip_toolchain(archive, tmp_path / "out", PREFIX)
    assert not (tmp_path / "evil").exists()


def test_the_programs_are_executable_and_the_prefix_is_dropped(tmp_path):
    archive = tmp_path / "t.zip"
    make_zip(
        archive, [PREFIX + "bin/go", PREFIX + "pkg/tool/linux_amd64/compile", PREFIX + "README"]
    )
    _unzip_toolchain(archive, tmp_path / "out", PREFIX)
    assert os.access(tmp_path / "out/bin/go", os.X_OK)
    assert os.access(tmp_path / "out/pkg/tool/linux_amd64/compile", os.X_OK)
    assert not os.access(tmp_path / "out/README", os.X_OK)
