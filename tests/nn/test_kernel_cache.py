"""Issue 35: a damaged cached C++ kernel (a ``.so`` truncated by a full disk or a killed build) is found before it
is loaded and rebuilt, with one warning, instead of killing every command with SIGBUS; and two checkouts of the same
version compile the same copied source, so they do not rebuild one build directory for each other."""

from __future__ import annotations

import ctypes.util
import shutil
from pathlib import Path

import pytest

from onlstm.nn import cpp_kernel


def test_a_library_whose_checksum_changed_is_removed(tmp_path, capsys):
    library = tmp_path / "onlstm_cpu_x.so"
    library.write_bytes(b"\x7fELF" + b"\0" * 100)
    cpp_kernel._stamp(library).write_text(cpp_kernel._digest(library))
    cpp_kernel.check_cached_library(library)  # as recorded: kept, nothing said
    assert library.exists() and capsys.readouterr().err == ""
    library.write_bytes(b"\x7fELF" + b"\0" * 10)  # truncated
    cpp_kernel.check_cached_library(library)
    assert not library.exists() and not cpp_kernel._stamp(library).exists()
    assert "is damaged (truncated or changed); rebuilding it" in capsys.readouterr().err


def test_without_a_checksum_it_is_loaded_in_a_child_first(tmp_path, capsys):
    broken = tmp_path / "broken.so"
    broken.write_bytes(b"\x7fELF" + b"\1" * 64)
    cpp_kernel.check_cached_library(broken)
    assert not broken.exists() and "damaged" in capsys.readouterr().err
    found = ctypes.util.find_library("m")
    real = next((p for d in ("/lib", "/usr/lib", "/lib64") for p in Path(d).rglob(found or "-")), None)
    if real is None:
        pytest.skip("no libm to stand for a good library")
    good = tmp_path / "good.so"
    shutil.copy(real, good)
    cpp_kernel.check_cached_library(good)
    assert good.exists()


def test_the_source_is_compiled_from_a_copy_in_the_build_directory(tmp_path, monkeypatch):
    from torch.utils import cpp_extension

    seen = {}

    def fake_load(name, sources, **kw):
        seen.update(name=name, sources=sources)
        return object()

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(cpp_extension, "load", fake_load)
    cpp_kernel._build_and_load()
    source = Path(seen["sources"][0])
    assert source.parent == tmp_path / seen["name"]  # the same path from every checkout
    assert source.read_bytes() == cpp_kernel._SOURCE.read_bytes()


def test_each_torch_installation_has_its_own_build_and_a_rebuilt_library_is_recorded_again(tmp_path, monkeypatch):
    """The build command names the installation's headers: two environments sharing one directory would rebuild
    it for each other, and the checksum of the first would call the second's build damaged (a CI run saw it)."""
    import torch
    from torch.utils import cpp_extension

    names = []

    def fake_load(name, sources, **kw):
        names.append(name)
        library = tmp_path / name / f"{name}.so"
        library.write_bytes(b"\x7fELF built " + str(len(names)).encode())  # each build's bytes differ
        return object()

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(cpp_extension, "load", fake_load)
    cpp_kernel._build_and_load()
    library = tmp_path / names[0] / f"{names[0]}.so"
    assert cpp_kernel._stamp(library).read_text() == cpp_kernel._digest(library)
    library.write_bytes(b"\x7fELF rebuilt by PyTorch")  # a build our check did not see: what loads is recorded
    cpp_kernel._record_loaded(library)
    assert cpp_kernel._stamp(library).read_text() == cpp_kernel._digest(library)
    monkeypatch.setattr(torch, "__file__", str(tmp_path / "another-env" / "torch" / "__init__.py"))
    cpp_kernel._build_and_load()
    assert names[1] != names[0]  # another installation, another build directory


def test_a_verified_library_that_loads_unchanged_is_hashed_once(tmp_path, monkeypatch):
    """Start-up reads and hashes the cached library once: the check before loading, not again after it."""
    from torch.utils import cpp_extension

    rebuild = {"on": True}

    def fake_load(name, sources, **kw):
        if rebuild["on"]:
            (tmp_path / name / f"{name}.so").write_bytes(b"\x7fELF built " + str(len(hashed)).encode())
        return object()

    hashed = []
    digest = cpp_kernel._digest
    monkeypatch.setattr(cpp_kernel, "_digest", lambda path: hashed.append(path) or digest(path))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(cpp_extension, "load", fake_load)
    cpp_kernel._build_and_load()  # a first build: hashed once, to record it
    assert len(hashed) == 1
    rebuild["on"] = False
    cpp_kernel._build_and_load()  # cached and verified, loaded as it was
    assert len(hashed) == 2
    rebuild["on"] = True
    cpp_kernel._build_and_load()  # verified, then rebuilt by the load: hashed again and recorded
    library = hashed[-1]
    assert len(hashed) == 4 and cpp_kernel._stamp(library).read_text() == digest(library)
