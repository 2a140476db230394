"""``onlstm data download`` for the Wikipedia corpora: published checksums are enforced, a missing one is
computed, printed and kept in the manifest, a zip's members are extracted under fixed names, and without a
network the command says how to use a local copy (the network is mocked: these tests never go online)."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

import onlstm.data.download as dl
from onlstm.cli import main
from onlstm.data.download import CORPORA, DownloadError, Source, download


def no_network(*args, **kwargs):
    raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")


def served(tmp_path: Path, files: dict[str, bytes]) -> str:
    """A folder URL (file://) holding ``files``: urllib reads it as it would an HTTP server."""
    root = tmp_path / "server"
    root.mkdir()
    for name, data in files.items():
        (root / name).write_bytes(data)
    return root.as_uri() + "/"


@pytest.mark.parametrize("corpus", ["wiki-gulordava", "wikitext-103", "ptb"])
def test_offline_download_fails_clearly_and_names_data_dir(tmp_path, monkeypatch, capsys, corpus):
    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    rc = main(["data", "download", corpus, "--to", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert rc == 1 and "no internet access" in err and f"--data-dir {tmp_path / 'c'}" in err
    assert "Temporary failure in name resolution" in err and "Traceback" not in err
    assert not [p for p in (tmp_path / "c").glob("*") if p.name != "download.json"]  # no partial file


def test_gulordava_without_published_checksum_records_and_then_checks_it(tmp_path):
    files = {"train.txt": b"the cat sat\n", "valid.txt": b"a cat\n", "test.txt": b"the dog\n", "vocab.txt": b"the\n"}
    url, logs = served(tmp_path, files), []
    download("wiki-gulordava", tmp_path / "wiki", url=url, log=logs.append)
    manifest = json.loads((tmp_path / "wiki" / "download.json").read_text())
    for name, data in files.items():
        assert (tmp_path / "wiki" / name).read_bytes() == data
        sha = hashlib.sha256(data).hexdigest()
        assert manifest[name] == {"url": url + name, "sha256": sha, "bytes": len(data), "published": None}
        assert any(sha in line and "no published checksum" in line for line in logs)
    logs.clear()  # a second run keeps the files, checked against the manifest
    download("wiki-gulordava", tmp_path / "wiki", url=url, log=logs.append)
    assert all("present, checksum as recorded in download.json" in line for line in logs) and len(logs) == 4
    (tmp_path / "wiki" / "valid.txt").write_bytes(b"changed\n")  # a file that changed on disk is fetched again
    logs.clear()
    download("wiki-gulordava", tmp_path / "wiki", url=url, log=logs.append)
    assert (tmp_path / "wiki" / "valid.txt").read_bytes() == files["valid.txt"]
    assert sum("present" in line for line in logs) == 3


def test_a_local_folder_is_a_url_and_the_users_files_are_never_replaced(tmp_path, capsys):
    files = {"train.txt": b"the cat sat\n", "valid.txt": b"a cat\n", "test.txt": b"the dog\n", "vocab.txt": b"the\n"}
    root = Path(served(tmp_path, files).removeprefix("file://"))
    for given in (str(root), str(root) + "/"):  # a plain path, with or without its slash, as --url
        to = tmp_path / f"to{len(given)}"
        assert main(["data", "download", "wiki-gulordava", "--to", str(to), "--url", given]) == 0
        assert all((to / name).read_bytes() == data for name, data in files.items())
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "valid.txt").write_bytes(b"my own notes\n")
    assert main(["data", "download", "wiki-gulordava", "--to", str(mine), "--url", str(root)]) == 2
    assert "valid.txt exists and is not wiki-gulordava's file" in capsys.readouterr().err
    assert (mine / "valid.txt").read_bytes() == b"my own notes\n" and sorted(p.name for p in mine.iterdir()) == [
        "valid.txt"
    ]
    assert main(["data", "download", "wiki-gulordava", "--to", str(mine), "--url", str(root), "--force"]) == 0
    assert (mine / "valid.txt").read_bytes() == files["valid.txt"]
    assert (
        main(["data", "download", "wiki-gulordava", "--to", str(tmp_path / "new"), "--url", str(tmp_path / "none")])
        == 2
    )
    assert not (tmp_path / "new").exists()  # the folder it made for a download that failed is not left behind


def zipped(members: dict[str, bytes]) -> bytes:
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def test_wikitext_zip_is_checked_then_its_members_extracted_under_fixed_names(tmp_path, monkeypatch):
    data = zipped(
        {f"wikitext-103/wiki.{s}.tokens": f" = {s} = \n the <unk> \n".encode() for s in ("train", "valid", "test")}
    )
    url = served(tmp_path, {"w.zip": data}) + "w.zip"
    with pytest.raises(DownloadError, match=r"checksum mismatch \(expected sha256 242ba0f2"):
        download("wikitext-103", tmp_path / "wt", url=url, log=lambda m: None)
    assert not (tmp_path / "wt" / "wikitext-103-v1.zip").exists()
    fake = Source(
        **{**CORPORA["wikitext-103"].__dict__, "files": {"wikitext-103-v1.zip": hashlib.sha256(data).hexdigest()}}
    )
    monkeypatch.setitem(CORPORA, "wikitext-103", fake)
    paths = download("wikitext-103", tmp_path / "wt", url=url, log=lambda m: None)
    assert [p.name for p in paths] == ["train.txt", "valid.txt", "test.txt"]
    assert (tmp_path / "wt" / "valid.txt").read_text() == " = valid = \n the <unk> \n"


def test_a_zip_without_the_expected_members_is_an_error(tmp_path, monkeypatch):
    data = zipped({"other/readme.txt": b"x"})
    fake = Source(
        **{**CORPORA["wikitext-103"].__dict__, "files": {"wikitext-103-v1.zip": hashlib.sha256(data).hexdigest()}}
    )
    monkeypatch.setitem(CORPORA, "wikitext-103", fake)
    with pytest.raises(DownloadError, match="has no wikitext-103/wiki.train.tokens; is it the wikitext-103 release"):
        download("wikitext-103", tmp_path / "wt", url=served(tmp_path, {"w.zip": data}) + "w.zip", log=lambda m: None)


def test_published_checksums_are_where_the_docs_say():
    assert CORPORA["wikitext-103"].files == {
        "wikitext-103-v1.zip": "242ba0f20b329cfdf1ccc61e9e9e5b59becf189db7f7a81cd2a0e2fc31539590"
    }
    assert all(v is None for v in CORPORA["wiki-gulordava"].files.values())
    assert CORPORA["wiki-gulordava"].url == "https://dl.fbaipublicfiles.com/colorless-green-rnns/training-data/English/"
    with pytest.raises(DownloadError, match="unknown corpus 'wiki'; choose one of ptb, wiki-gulordava, wikitext-103"):
        dl.download("wiki", Path("/nonexistent"))
