"""The LAVA target's own parts: the specification, job templates, the generated jobs (every one checked
with LAVA's own schema, lava-common), the job log and results frame readers, and an experiment of two
LAVA variants run against the recorded responses of a real server (tests/support/lava_fake.py): failed cells
carry LAVA's reason and a rerun measures them again; results carry the LAVA device; the token is
nowhere but in the requests."""
from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import tarfile

import pytest
import yaml

from support import assert_one_sentence_error, run_cli
from support.lava_fake import DATA, FakeLava
from kperfdiff.core.errors import KperfdiffError, UsageError
from kperfdiff.targets import validate_spec
from kperfdiff.targets.guest import frame
from kperfdiff.targets.lava import jobs, log as joblog
from kperfdiff.targets.lava.spec import parse_spec

TOKEN = "kpd-secret-4b1d7e0c9a"


# -- the specification --------------------------------------------------------------------------------

def test_spec_options_and_defaults():
    s = parse_spec("lava://lava.example.org/lava/bcm2711-rpi-4-b,arch=arm64,kernel=6.1,jobs=8,tags=rpi4+lab1,"
                   "dtb=https://x/y.dtb,queue_timeout=600,identity=lab")
    assert (s.server, s.prefix, s.device_type, s.arch, s.boot, s.jobs, s.tags) == \
        ("lava.example.org", "/lava", "bcm2711-rpi-4-b", "arm64", "u-boot", 8, ["rpi4", "lab1"])
    assert s.url == "https://lava.example.org/lava" and s.queue_timeout == 600 and not s.emulated
    assert s.poll == 10 and parse_spec("lava://lab/qemu,poll=0.5").poll == 0.5
    q = parse_spec("lava://127.0.0.1:8000/qemu,http,arch=aarch64,rootfs=http://r/rootfs.cpio.gz")
    assert (q.url, q.arch, q.boot, q.prompt, q.emulated) == ("http://127.0.0.1:8000", "arm64", "qemu", "/ #", True)
    assert validate_spec("lava://lab/qemu") == "lava"


@pytest.mark.parametrize("spec, words", [
    ("lava://", "lava://HOST[:PORT]/DEVICE_TYPE"),
    ("lava://lab.example.org", "lava://HOST[:PORT]/DEVICE_TYPE"),
    ("lava://lab:99999/qemu", "lava://HOST[:PORT]/DEVICE_TYPE"),
    ("lava://lab/rpi4", "needs arch=arm64 or arch=x86_64"),
    ("lava://lab/qemu,jobs=0", "jobs=0"),
    ("lava://lab/qemu,token=abc", "is not understood"),
    ("lava://lab/qemu,arch=riscv64", "use arm64 or x86_64"),
    ("lava://lab/qemu,boot=grub", "template=PATH"),
    ("lava://lab/qemu,jobs=2,jobs=3", "given twice"),
    ("lava://lab/qemu,artefacts_url=http://x/", "needs artefacts=DIR"),
    ("lava://lab/qemu,poll=0", "poll=0 in"),
    ("lava://lab/qemu,poll=soon", "from 0.1 to 3600"),
    # a job whose kernel keeps its 'Linux version' line off the console hangs in LAVA's boot action
    ("lava://lab/qemu,append=quiet", "quiet keeps the kernel's 'Linux version' line off the console"),
    ("lava://lab/qemu,append=nokaslr loglevel=3", "loglevel=3 keeps"),
])
def test_a_bad_spec_is_one_sentence(spec, words):
    with pytest.raises(UsageError) as e:
        parse_spec(spec)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_command_line_that_would_hang_a_lava_job_is_refused_and_a_loud_one_is_not():
    from kperfdiff.targets.lava.target import LavaTarget
    with pytest.raises(UsageError, match="leave quiet out of a LAVA job's command line"):
        LavaTarget("lava://lab/qemu,arch=x86_64", cmdline="transparent_hugepage=never quiet")
    assert parse_spec("lava://lab/qemu,append=loglevel=7 nokaslr").append == "loglevel=7 nokaslr"
    assert LavaTarget("lava://lab/qemu,arch=x86_64", cmdline="loglevel=6").cmdline == "loglevel=6"


# -- templates and generated jobs ---------------------------------------------------------------------

def test_placeholders_keep_their_type_and_an_empty_one_drops_its_key():
    t = {"a": "@N@", "b": "x @N@ y", "c": {"d": "@NONE@", "e": ["@L@"]}, "f": None}
    assert jobs.fill(t, {"N": 3, "NONE": None, "L": [1, 2]}, "t") == {"a": 3, "b": "x 3 y", "c": {"e": [[1, 2]]},
                                                                      "f": None}
    with pytest.raises(jobs.TemplateError, match="uses @NOPE@, which kperfdiff does not fill in"):
        jobs.fill({"a": "@NOPE@"}, {}, "my.yaml")


def _published():
    return jobs.Published("http://h/k", "a" * 64, "http://h/r.cpio.gz", "b" * 64, "gz", "http://h/job.sh",
                          "c" * 64, "http://h/cases", "d" * 64)


def _job(spec: str, **kw) -> dict:
    s = parse_spec(spec)
    vals = jobs.values(s, kw.pop("pub", _published()), job_name="kperfdiff t/v rep 1",
                       tests=jobs.test_definitions("kperfdiff: 2 benchmark runs"), metadata={"kperfdiff.rep": "1"},
                       test_timeout=600, boot_timeout=300, deploy_timeout=300, cmdline_extra=kw.pop("cmdline", ""))
    return jobs.definition(s, vals)


def lava_validate(tmp_path, named: dict[str, dict]) -> dict:
    """Every job through lava_common's own schema (strict, as the server does on submission)."""
    paths = []
    for name, job in named.items():
        p = tmp_path / f"{name}.yaml"
        p.write_text(jobs.to_yaml(job, "test"))
        paths.append(p)
    assert jobs.lava_python(), "lava-common is not installed: run `make setup` (Debian package lava-common)"
    version, bad = jobs.validate_files(paths)
    assert version.startswith("20"), version
    return bad


def test_every_shipped_template_gives_jobs_lavas_schema_accepts(tmp_path):
    named = {
        "qemu-x86_64": _job("lava://lab/qemu,arch=x86_64,mem=1G,cpus=4", cmdline="transparent_hugepage=never"),
        "qemu-arm64-kvm": _job("lava://lab/qemu,arch=arm64,kvm=on,tags=big+fast,priority=high,visibility=personal"),
        "qemu-rootfs": _job("lava://lab/qemu,rootfs=http://r/rootfs.cpio.xz",
                            pub=jobs.Published("http://h/k", "a" * 64, "http://r/rootfs.cpio.xz", None, "xz",
                                               "http://h/job.sh", "c" * 64, "http://h/cases", "d" * 64,
                                               "http://h/kpd.tar.gz", "e" * 64)),
        "u-boot-arm64": _job("lava://lab/bcm2711-rpi-4-b,arch=arm64,dtb=http://h/bcm2711-rpi-4-b.dtb,priority=20"),
        "u-boot-no-dtb": _job("lava://lab/meson-g12b-a311d-khadas-vim3,arch=arm64,append=nokaslr"),
    }
    assert lava_validate(tmp_path, named) == {}
    q = named["qemu-x86_64"]
    assert q["context"] == {"arch": "amd64", "memory": 1024, "cpu": "max", "no_kvm": True,
                            "extra_options": ["-smp 4", "-cpu max"]}
    kernel = q["actions"][0]["deploy"]["images"]["kernel"]
    assert kernel["image_arg"].endswith('-append "console=ttyS0,115200 rdinit=/init clocksource=tsc tsc=reliable '
                                        'transparent_hugepage=never"')
    ramdisk = q["actions"][0]["deploy"]["images"]["ramdisk"]
    assert ramdisk["overlays"]["job"] == {"url": "http://h/job.sh", "format": "file", "path": "/kpd/job.sh",
                                          "sha256sum": "c" * 64}
    assert "tags" not in q and "dtb" not in named["u-boot-no-dtb"]["actions"][0]["deploy"]
    assert named["u-boot-no-dtb"]["context"] == {"extra_kernel_args": "nokaslr"}
    assert named["qemu-rootfs"]["actions"][1]["boot"]["prompts"] == ["/ #"]
    # LAVA keeps the inline definition with every result and refuses more than 4 KB there
    assert len(yaml.safe_dump(q["actions"][2]["test"]["definitions"])) < 3000


def test_lavas_schema_catches_a_broken_job(tmp_path):
    job = _job("lava://lab/qemu")
    del job["visibility"]
    bad = lava_validate(tmp_path, {"broken": job})
    assert list(bad.values()) == ["required key not provided @ data['visibility']"]


def test_a_users_template_is_filled_in_and_a_useless_one_refused(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(jobs.shipped_template("qemu").replace("priority: \"@PRIORITY@\"", "priority: 90"))
    job = _job(f"lava://lab/qemu,template={mine}")
    assert job["priority"] == 90 and lava_validate(tmp_path, {"mine": job}) == {}
    (tmp_path / "no-test.yaml").write_text("job_name: x\nactions:\n- boot: {method: qemu}\n")
    with pytest.raises(jobs.TemplateError, match="has no @TEST_DEFINITIONS@"):
        _job(f"lava://lab/qemu,template={tmp_path / 'no-test.yaml'}")
    (tmp_path / "bad.yaml").write_text("job_name: [x\n")
    with pytest.raises(KperfdiffError, match=r"is not valid YAML \(line 2\)"):
        _job(f"lava://lab/qemu,template={tmp_path / 'bad.yaml'}")


def test_the_scripts_are_literal_blocks_a_reviewer_can_read():
    text = jobs.to_yaml(_job("lava://lab/qemu"), "generated for a test")
    assert text.startswith("# generated for a test\n")
    assert "- |\n            cat > /tmp/kpd-lava.sh <<'KPD_LAVA_RUNNER'\n            #!/bin/sh\n" in text
    assert yaml.safe_load(text)["actions"][2]["test"]["definitions"][0]["repository"]["run"]["steps"][1] == \
        "sh /tmp/kpd-lava.sh"


# -- the job log and the results frame ---------------------------------------------------------------

def test_the_recorded_log_gives_console_lines_errors_and_lavas_test_cases(tmp_path):
    log = joblog.read(DATA / "job-complete.log")
    assert "KPD-LAVA-SHELL" in " ".join(log.console[:2000]) and log.unreadable == 0 and log.errors == []
    assert [c["case"] for c in log.cases] == ["fault.anon.4k.P1.r0", "syscall.null.P1.r0"]
    out = joblog.results_folder(log, tmp_path / "out", "the test log")
    assert sorted(p.name for p in out.iterdir()) == ["complete", "dmesg", "facts", "i0", "i1", "kallsyms"]
    bad = joblog.read(DATA / "job-incomplete.log")
    assert bad.reason().startswith("Invalid job data: [\"Unable to get 'http://127.0.0.1:9/nothing/vmlinuz'")


def _frame(files: dict[str, bytes], header: str | None = None) -> list[str]:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    gz = gzip.compress(buf.getvalue())
    b64 = base64.encodebytes(gz).decode().splitlines()
    head = header if header is not None else f"KPD-TAR-BEGIN {len(gz)} {hashlib.sha256(gz).hexdigest()}"
    return ["boot noise", head, *b64, "KPD-TAR-END", "KPD-END 0"]


def test_a_frame_is_decoded_and_every_damage_is_one_sentence(tmp_path):
    data = os.urandom(3000)      # incompressible: many lines of base64
    lines = _frame({"./a/b": data})
    frame.unpack(frame.decode(lines, "the console"), tmp_path / "ok", "the console")
    assert (tmp_path / "ok" / "a" / "b").read_bytes() == data
    assert frame.decode(_frame({"x": b"1"}, header="KPD-TAR-BEGIN"), "c")         # the first version: no count
    cases = {
        "ends inside the results frame that starts at line 2": lines[:5],
        "is broken at line 4 by a line that is not base64": lines[:3] + ["[  12.3] a kernel message"] + lines[3:],
        "holds no results frame": ["nothing", "here"],
        "not the 9 it announced": [lines[0], "KPD-TAR-BEGIN 9 -", *lines[2:]],
        "does not match its SHA-256": [lines[0], lines[1][:-64] + "0" * 64, *lines[2:]],
        "malformed first line": ["KPD-TAR-BEGIN twelve"],
        "is not valid base64": [lines[0], "KPD-TAR-BEGIN", "abc", "KPD-TAR-END"],
    }
    for words, damaged in cases.items():
        with pytest.raises(frame.FrameError) as e:
            frame.decode(damaged, "the console")
        assert words in str(e.value) and "\n" not in str(e.value), words
    with pytest.raises(frame.FrameError, match="not a gzip stream"):
        frame.unpack(b"plain", tmp_path / "x", "the console")


def test_a_frame_cannot_write_outside_its_folder(tmp_path):
    lines = _frame({"../escape": b"x"})
    with pytest.raises(frame.FrameError, match="not a readable tar archive"):
        frame.unpack(frame.decode(lines, "c"), tmp_path / "out", "c")
    assert not (tmp_path / "escape").exists()


# -- experiments against the recorded server ---------------------------------------------------------

EXPERIMENT = """name = "lava-fake"
benchmarks = ["fault.anon.4k", "syscall.null"]
cores = [1]
reps = 1
tiny = true
[[variant]]
label = "base"
target = "lava://{host}/qemu,http,arch=x86_64,kernel={kernel},jobs=2,poll=0.2"
[[variant]]
label = "nothp"
target = "lava://{host}/qemu,http,arch=x86_64,kernel={kernel},jobs=2,poll=0.2"
cmdline = "transparent_hugepage=never"
"""


@pytest.fixture
def fake_kernel(tmp_path):
    k = tmp_path / "vmlinuz-test"
    k.write_bytes(os.urandom(4096))
    return k


def test_an_experiment_of_lava_variants_fails_cells_with_lavas_reason_and_a_rerun_resumes_them(
        tmp_path, home, fake_kernel, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    server = FakeLava(TOKEN, scripts=[{"states": ["job-submitted", "job-incomplete"], "log": "job-incomplete.log"}])
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT.format(host=server.host, kernel=fake_kernel))
    env = {"KPERFDIFF_LAVA_TOKEN": TOKEN}
    try:
        first = run_cli("run", exp, "--no-progress", "--format", "json", env=env, timeout=900)
        assert first.returncode == 1, first.stderr
        assert "base: fault.anon.4k -P 1 rep 1 failed: LAVA job 1 on qemu-02 was incomplete: Invalid job data" \
            in first.stderr
        assert "2 cells failed; run the same command again to retry them" in first.stderr
        assert len(server.definitions) == 2
        second = run_cli("run", exp, "--no-progress", env=env, timeout=900)
        assert second.returncode == 0, second.stderr
        assert "resuming experiment lava-fake" in second.stderr and "2 cells to measure" in second.stderr
        assert len(server.definitions) == 3           # only the failed variant's job again
    finally:
        server.close()
    shown = json.loads(run_cli("show", "lava-fake/base", "--format", "json", check=0).stdout)
    assert {r["status"] for r in shown["results"]} == {"ok"}
    info = shown["results"][0]["info"][0]
    assert (info["lava_job"], info["lava_device"], info["lava_device_type"]) == (3, "qemu-01", "qemu")
    assert shown["machine"]["lava_device_type"] == "qemu" and shown["machine"]["emulated"]
    text = run_cli("show", "lava-fake/base", check=0).stdout
    assert "LAVA job 3 on qemu-01" in text and "lava_device_type qemu" in text
    # the token: only in the requests' headers
    assert all(auth == f"Token {TOKEN}" for _, _, auth in server.requests)
    everywhere = [first.stdout, first.stderr, second.stdout, second.stderr, *server.definitions]
    assert not any(TOKEN in text for text in everywhere)
    for p in home.rglob("*"):
        if p.is_file():
            assert TOKEN.encode() not in p.read_bytes(), p


def test_a_refused_token_stops_the_run_with_one_sentence(tmp_path, home, fake_kernel, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    server = FakeLava("the-right-one")
    try:
        p = run_cli("bench", "--target", f"lava://{server.host}/qemu,http,kernel={fake_kernel}", "--only",
                    "syscall.null", "--no-progress", env={"KPERFDIFF_LAVA_TOKEN": TOKEN}, timeout=900)
    finally:
        server.close()
    assert_one_sentence_error(p)
    assert "refused the token for the job submission (HTTP 403: Invalid token.)" in p.stderr
    assert TOKEN not in p.stderr + p.stdout


def test_lava_jobs_writes_reviewable_jobs_lava_accepts(tmp_path, home, fake_kernel):
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT.format(host="lava.example.org", kernel=fake_kernel).replace(",http", "")
                   .replace("reps = 1", "reps = 2"))
    out = tmp_path / "jobs"
    p = run_cli("lava", "jobs", exp, "-o", out, "--validate", "--artefacts-url", "https://files.example.org/kpd",
                timeout=900)
    assert p.returncode == 0, p.stderr
    assert "4 of 4 jobs valid for LAVA's schema (lava-common 20" in p.stderr
    names = sorted(x.name for x in out.glob("*.yaml"))
    assert names == ["lava-fake.base.r1.yaml", "lava-fake.base.r2.yaml", "lava-fake.nothp.r1.yaml",
                     "lava-fake.nothp.r2.yaml"]
    job = yaml.safe_load((out / "lava-fake.nothp.r2.yaml").read_text())
    images = job["actions"][0]["deploy"]["images"]
    assert images["kernel"]["url"].startswith("https://files.example.org/kpd/") and \
        "transparent_hugepage=never" in images["kernel"]["image_arg"]
    script = next(out.glob("artefacts/*-kpd-job.sh")).read_text()
    assert "kpd-fault fault.anon.4k" in script and "kpd-syscall syscall.null" in script
    for name, spec in (("job", images["ramdisk"]["overlays"]["job"]), ("ramdisk", images["ramdisk"])):
        f = out / "artefacts" / spec["url"].rsplit("/", 1)[1]
        assert hashlib.sha256(f.read_bytes()).hexdigest() == spec["sha256sum"], name
    assert {k: v for k, v in job["metadata"].items() if k != "kperfdiff.version"} == {
        "kperfdiff.experiment": "lava-fake", "kperfdiff.variant": "nothp", "kperfdiff.rep": "2"}


def test_lava_jobs_without_a_lava_variant_or_a_token_word_in_the_spec_is_one_sentence(tmp_path, home):
    exp = tmp_path / "local.toml"
    exp.write_text('name = "x"\nbenchmarks = ["syscall.null"]\n[[variant]]\nlabel = "a"\n')
    p = run_cli("lava", "jobs", exp, "-o", tmp_path / "o")
    assert_one_sentence_error(p)
    assert "no variant of experiment x has a lava:// target" in p.stderr
    exp.write_text('name = "x"\nbenchmarks = ["syscall.null"]\n[[variant]]\nlabel = "a"\n'
                   'target = "lava://lab/qemu,token=abc"\n')
    p = run_cli("lava", "jobs", exp, "-o", tmp_path / "o")
    assert_one_sentence_error(p)
    assert "the option 'token=abc' of target 'lava://lab/qemu,token=abc' is not understood" in p.stderr


def test_published_files_are_named_by_content_and_only_they_are_served(tmp_path):
    import urllib.error
    import urllib.request
    from kperfdiff.targets.lava import artefacts
    f = tmp_path / "vmlinuz"
    f.write_bytes(b"kernel bytes")
    digest = hashlib.sha256(b"kernel bytes").hexdigest()
    folder = artefacts.Folder(tmp_path / "pub", "https://files.example.org/kpd")
    assert folder.publish(f) == (f"https://files.example.org/kpd/{digest[:16]}-vmlinuz", digest)
    assert (tmp_path / "pub" / f"{digest[:16]}-vmlinuz").read_bytes() == b"kernel bytes"
    assert artefacts.Folder(tmp_path / "pub2").url == (tmp_path / "pub2").as_uri() + "/"
    server = artefacts.Server("127.0.0.1:8000", serve="127.0.0.1:0")
    try:
        url, _ = server.publish(f)
        assert url.startswith("http://127.0.0.1:") and urllib.request.urlopen(url).read() == b"kernel bytes"
        for other in ("", "etc/passwd", "../vmlinuz", f"{digest[:16]}-other"):
            with pytest.raises(urllib.error.HTTPError, match="404"):
                urllib.request.urlopen(server.url + other)
    finally:
        server.close()
