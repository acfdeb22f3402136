"""Names a dataset or a config chooses (issue 31 case 8 and its neighbours): a file name
that is not UTF-8 is read and recorded; temp files never outlive a failed write; source
names that are not folder names, credentials in an endpoint URL and GBK bytes read as
latin-1 are caught before or while reading, in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from chaos_kit import assert_accounted, output_ids, run_local, write_lines

from dataforge.cli import main
from dataforge.io.fs import StorageError
from dataforge.io.sinks import write_json_atomic
from dataforge.rundir.store import RunStore

NAME = b"caf\xe9-\xff.jsonl"  # latin-1 bytes: not UTF-8


@pytest.fixture
def odd_name_pipeline(tmp_path: Path, write_pipeline) -> Path:
    write_lines(tmp_path / "in" / "ok.jsonl", ["first document", "second document"])
    with open(os.fsencode(tmp_path / "in") + b"/" + NAME, "wb") as f:
        f.write(b'{"text": "third document"}\n')
    return write_pipeline(
        tmp_path,
        """
        name: odd
        inputs: [{name: s, path: "in/*.jsonl", lang: en}]
        output: {path: out}
        """,
    )


def test_a_file_name_that_is_not_utf8_is_read_and_recorded(
    odd_name_pipeline: Path, tmp_path: Path
) -> None:
    assert main(["validate", str(odd_name_pipeline)]) == 0
    out = tmp_path / "out"
    manifest = run_local(odd_name_pipeline, out)
    assert_accounted(manifest)
    assert manifest["counts"]["total"]["kept"] == 3
    # ids are text: the bytes that are not UTF-8 read \xNN
    assert sorted(output_ids(out)) == ["s/caf\\xe9-\\xff.jsonl:1", "s/ok.jsonl:1", "s/ok.jsonl:2"]
    for name in ("plan.json", "manifest.json"):
        raw = (out / name).read_bytes()
        raw.decode("utf-8")  # strict: the file is valid UTF-8 JSON
        assert b"caf\\udce9-\\udcff.jsonl" in raw  # the documented escape of each byte
    paths = [i["path"] for i in json.loads((out / "manifest.json").read_bytes())["inputs"]]
    assert os.fsencode(tmp_path / "in") + b"/" + NAME in [os.fsencode(p) for p in paths]
    assert [p.name for p in out.iterdir() if ".tmp" in p.name] == []
    # the same run again finds its output complete (the plan read back names the same file)
    assert run_local(odd_name_pipeline, out) == manifest


def test_a_failed_json_write_leaves_no_temp_file(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        write_json_atomic(tmp_path / "plan.json", {"x": {1, 2}})  # a set is not JSON
    (tmp_path / "manifest.json").mkdir()  # the rename onto a folder fails
    with pytest.raises(OSError):
        write_json_atomic(tmp_path / "manifest.json", {"x": 1})
    store = RunStore(tmp_path)
    with pytest.raises(OSError):
        store.write_bytes("manifest.json", b"{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]


@pytest.mark.parametrize("name", [".", "..", "a/b", "a\\b", "", "tab\there"])
def test_a_source_name_that_is_not_a_folder_name_is_refused(
    tmp_path: Path, write_pipeline, name: str, capsys
) -> None:
    write_lines(tmp_path / "in" / "a.jsonl", ["a document"])
    pipeline = write_pipeline(
        tmp_path,
        f"""
        name: n
        inputs: [{{name: {json.dumps(name)}, path: "in/*.jsonl"}}]
        output: {{path: out}}
        """,
    )
    code = main(["validate", str(pipeline)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {pipeline}: inputs[0]: name={name!r}: a source name is")


def test_credentials_in_an_endpoint_url_are_never_echoed(
    tmp_path: Path, write_pipeline, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    write_lines(tmp_path / "in" / "a.jsonl", ["a document"])
    body = """
        name: n
        inputs: [{name: s, path: "in/*.jsonl"}]
        output: {path: "s3://bucket/out"}
        """
    pipeline = write_pipeline(tmp_path, body)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://user:hunter2@127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "key")
    assert main(["validate", str(pipeline)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: s3://bucket/out: cannot reach the storage endpoint http://127.0.0.1:9"
    ], err
    in_yaml = (
        body.rstrip(" ") + '        storage: {endpoint_url: "https://user:hunter2@host:9000"}\n'
    )
    assert main(["validate", str(write_pipeline(tmp_path, in_yaml))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hunter2" not in err[0], err
    assert "endpoint_url 'https://***@host:9000' holds credentials" in err[0]
    message = str(StorageError("Could not connect to https://AKIA:s3cr3t@host/b/k"))
    assert message == "Could not connect to https://***@host/b/k"


def test_gbk_bytes_read_as_latin1_are_flagged_suspect(tmp_path: Path, write_pipeline) -> None:
    texts = ["今天天气很好，我们去公园散步吧。", "北京是中国的首都，人口众多。"] * 5
    gbk = "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "gbk.jsonl").write_bytes(gbk.encode("gbk"))
    french = ["Le café est très bon, à côté de l'hôtel élégant.", "Où êtes-vous? Ça va."] * 5
    latin = "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in french)
    (tmp_path / "in" / "fr.jsonl").write_bytes(latin.encode("latin-1"))
    pipeline = write_pipeline(
        tmp_path,
        """
        name: enc
        inputs: [{name: s, path: "in/*.jsonl", lang: zh, encoding: latin-1}]
        output: {path: out}
        """,
    )
    manifest = run_local(pipeline, tmp_path / "out")
    assert_accounted(manifest)
    decoding = {Path(i["path"]).name: i["decoding"] for i in manifest["inputs"]}
    assert decoding["gbk.jsonl"]["suspect"] is True
    assert decoding["gbk.jsonl"]["suspect_reason"] == "cjk_double_byte"
    assert decoding["fr.jsonl"]["suspect"] is False and "suspect_reason" not in decoding["fr.jsonl"]
    counts = manifest["counts"]["by_source"]["s"]
    assert counts["events"]["suspect:cjk_double_byte"] == 10  # each record of gbk.jsonl
    [warning] = manifest["warnings"]
    assert warning.startswith(f"{tmp_path / 'in' / 'gbk.jsonl'}: its bytes are CJK double-byte")
    assert "inputs[0].encoding" in warning
