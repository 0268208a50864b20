"""`mt translate` and `mt evaluate` through the real CLI entry point, on a tiny random checkpoint.

The checkpoint is an untrained tiny model (configs/tiny.yaml, the prepared tiny run's
tokenizer) whose EOS logit is zeroed so that it writes non-empty, input-dependent output. Its
config points `data.path` at a folder holding 8-line copies of two Multi30k splits.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mt.cli import main
from mt.config import Config, DecodeConfig, SearchConfig
from mt.data.corpus import read_split
from mt.data.tokenizer import EOS_ID, Tokenizer
from mt.decode.overrides import DecodeOverrides, apply_overrides
from mt.decode.translate import translate_lines, translate_texts, translate_texts_nbest
from mt.errors import MTError
from mt.eval.evaluate import score
from mt.model.checkpoint import inference_state, load_for_inference, save_checkpoint
from mt.model.transformer import Transformer
from mt.text.segment import Segmenter, segmenter_for

BIN = Path(sys.executable).parent
N = 8


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def small_data(tiny_run: Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """val and test_2016_flickr, 8 lines each, as {split}.en / {split}.de."""
    folder = tmp_path_factory.mktemp("small_data")
    for split in ("val", "test_2016_flickr"):
        src, tgt = read_split(tiny_run.data, split)
        (folder / f"{split}.en").write_text("\n".join(src[:N]) + "\n", encoding="utf-8")
        (folder / f"{split}.de").write_text("\n".join(tgt[:N]) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def ckpt(tiny_run: Config, small_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """runs/<tmp>/run/checkpoints/model.pt: a random tiny model, decode.beam = 2."""
    cfg = dataclasses.replace(tiny_run, data=dataclasses.replace(tiny_run.data, path=str(small_data)))
    tokenizer = Tokenizer.from_files(tiny_run.run_dir)
    torch.manual_seed(0)
    model = Transformer(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, joint_vocab=tokenizer.joint)
    with torch.no_grad():
        model.tgt_embed.weight[EOS_ID] = 0.0  # tied output: EOS logit 0, rarely the best
    path = tmp_path_factory.mktemp("eval_run") / "run" / "checkpoints" / "model.pt"
    save_checkpoint(path, inference_state(cfg, tokenizer, model))
    return path


@pytest.fixture(scope="module")
def loaded(ckpt: Path):
    return load_for_inference(ckpt, "cpu")


def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *args: object) -> tuple[int, str, str]:
    """Run the real entry point `mt.cli.main` in-process -> (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["mt", *map(str, args)])
    code = 0
    try:
        main()
    except SystemExit as e:
        code = int(e.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def val_lines(small_data: Path, lang: str = "en") -> list[str]:
    return (small_data / f"val.{lang}").read_text(encoding="utf-8").splitlines()


def segmenter_of(cfg: Config) -> Segmenter:
    """The sentence splitter `mt translate` uses for the model's pair."""
    return segmenter_for(cfg.data.src_lang, cfg.data.tgt_lang)


def as_mt_translate(loaded: tuple[Transformer, Tokenizer, Config], lines: list[str], decode: DecodeConfig) -> list[str]:
    """What `mt translate` (segmented, its text rules and loop retry) writes for `lines`."""
    model, tokenizer, cfg = loaded
    return translate_texts(model, tokenizer, lines, decode, device="cpu", segmenter=segmenter_of(cfg))


def test_translate_keeps_line_count_and_order(ckpt, loaded, small_data, tmp_path, monkeypatch, capsys):
    src = val_lines(small_data)
    lines = [src[0], "", src[1], "   ", src[2], src[3], "", src[4]]
    inp, out = tmp_path / "in.txt", tmp_path / "out.txt"
    inp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, _, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", inp, "-o", out, "--beam", "1")
    assert code == 0, err
    got = out.read_text(encoding="utf-8").split("\n")
    assert got[-1] == "" and len(got[:-1]) == len(lines)
    got = got[:-1]
    assert [g.strip() == "" for g in got] == [not line.strip() for line in lines]
    assert got[3] == "   "  # segmenting keeps a line's whitespace as it was
    model, tokenizer, cfg = loaded
    decode = apply_overrides(cfg.decode, DecodeOverrides(beam=1))
    alone = [as_mt_translate(loaded, [line], decode)[0] for line in lines]
    assert got == alone  # batched, length-sorted translation comes back in input order (one sentence a line)
    assert len(set(got) - {"", "   "}) == 5  # five different non-empty sentences, five different outputs

    # stdout, beam search from the checkpoint's config (beam 2), no trailing newline on the input
    inp.write_text("\n".join(lines), encoding="utf-8")
    code, stdout, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", inp)
    assert code == 0, err
    decode = apply_overrides(cfg.decode, DecodeOverrides())
    assert decode.search.beam == 2
    assert stdout.split("\n") == as_mt_translate(loaded, lines, decode) + [""]


def test_translate_nbest_format(ckpt, loaded, small_data, tmp_path, monkeypatch, capsys):
    lines = val_lines(small_data)[:3]
    lines.insert(1, "")
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, stdout, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", inp, "--n-best", "3")
    assert code == 0, err
    rows = [re.fullmatch(r"(\d+) \|\|\| (.*) \|\|\| (-?\d+\.\d{4})", line) for line in stdout.splitlines()]
    assert all(rows), stdout
    by_line: dict[int, list[tuple[str, float]]] = {}
    for m in rows:
        by_line.setdefault(int(m.group(1)), []).append((m.group(2), float(m.group(3))))
    assert sorted(by_line) == [0, 1, 2, 3]
    assert by_line[1] == [("", 0.0)]
    model, tokenizer, cfg = loaded
    decode = apply_overrides(cfg.decode, DecodeOverrides(beam=3))
    for i in (0, 2, 3):
        scores = [s for _, s in by_line[i]]
        assert len(scores) == 3 and scores == sorted(scores, reverse=True)
        assert by_line[i][0][0] == translate_texts_nbest(model, tokenizer, [lines[i]], decode, device="cpu",
                                                         segmenter=segmenter_of(cfg))[0][0][0]


def test_translate_interactive_flushes_each_line(ckpt, loaded, small_data):
    # A terminal on stdin: the translation of a line must appear before stdin is closed.
    model, tokenizer, cfg = loaded
    line = val_lines(small_data)[5]
    decode = apply_overrides(cfg.decode, DecodeOverrides())
    expected = as_mt_translate(loaded, [line], decode)[0]
    pid, fd = pty.fork()
    if pid == 0:  # child: the real console script on a pseudo-terminal
        os.execve(str(BIN / "mt"), [str(BIN / "mt"), "translate", "-c", str(ckpt), "--device", "cpu"],
                  {**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        os.write(fd, (line + "\n").encode("utf-8"))
        seen, deadline = b"", time.monotonic() + 60
        while expected.encode("utf-8") not in seen.replace(b"\r", b"") and time.monotonic() < deadline:
            if select.select([fd], [], [], 1.0)[0]:
                seen += os.read(fd, 4096)
        assert expected.encode("utf-8") in seen.replace(b"\r", b""), seen
    finally:
        os.write(fd, b"\x04")  # EOF, also after a failed assertion (the child would wait on stdin for ever)
        for _ in range(100):  # 10 s to end, then killed: a failing test fails, it never hangs the suite
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0


def test_bad_inputs_give_one_line_errors(ckpt, small_data, tmp_path, monkeypatch, capsys):
    def fails(*args: object, needles: tuple[str, ...]) -> None:
        code, _, err = run_cli(monkeypatch, capsys, *args)
        assert code == 2, err
        assert err.startswith("mt: error: ") and err.count("\n") == 1, err
        for needle in needles:
            assert needle in err, (needle, err)

    good = tmp_path / "good.txt"
    good.write_text("A dog runs.\n", encoding="utf-8")
    fails("translate", "-c", tmp_path / "missing.pt", "-i", good, needles=("missing.pt",))
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"this is not a checkpoint\x00\x01")
    fails("translate", "-c", corrupt, "-i", good, needles=("corrupt.pt",))
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(ckpt.read_bytes()[:5000])
    fails("translate", "-c", truncated, "-i", good, needles=("truncated.pt",))

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"A dog runs.\nA cat \xff\xfe sleeps.\n")
    out = tmp_path / "out.txt"
    out.write_text("earlier results\n", encoding="utf-8")
    fails("translate", "-c", ckpt, "-i", bad, "-o", out, needles=("bad.txt", "line 2", "UTF-8"))
    assert out.read_text(encoding="utf-8") == "earlier results\n"  # never truncated on failure

    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("a\nb\nc\n", encoding="utf-8")
    ref.write_text("a\nb\n", encoding="utf-8")
    fails("evaluate", "--hyp", hyp, "--ref", ref, needles=("hyp.txt", "ref.txt", "3", "2"))
    fails("evaluate", "-c", ckpt, "--src", hyp, "--ref", ref, needles=("hyp.txt", "ref.txt", "3", "2"))
    fails("evaluate", "-c", ckpt, "--split", "nosuchsplit", needles=("nosuchsplit",))
    fails("evaluate", "-c", ckpt, needles=("--split",))
    fails("evaluate", "--hyp", hyp, needles=("--ref",))
    fails("translate", "-c", ckpt, "-i", good, "--beam", "2", "--n-best", "3", needles=("--n-best",))


def perturbed(refs: list[str]) -> list[str]:
    """Imperfect hypotheses: dropped words, changed case, an empty line, one exact copy."""
    out = []
    for i, r in enumerate(refs):
        words = r.split()
        if i % 4 == 0:
            out.append(" ".join(words[:-2]))
        elif i % 4 == 1:
            out.append(r.lower())
        elif i % 4 == 2:
            out.append("")
        else:
            out.append(r)
    return out


def sacrebleu_cli(ref: Path, hyp: Path) -> list[float]:
    result = subprocess.run([str(BIN / "sacrebleu"), str(ref), "-i", str(hyp), "-m", "bleu", "chrf", "ter",
                             "-b", "-w", "4"], capture_output=True, text=True, check=True)
    return [float(x) for x in json.loads(result.stdout)]  # -b with several metrics: a JSON list


def test_scores_equal_sacrebleu_command_line(ckpt, small_data, tmp_path, monkeypatch, capsys):
    ref = small_data / "val.de"
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("\n".join(perturbed(val_lines(small_data, "de"))) + "\n", encoding="utf-8")
    code, stdout, err = run_cli(monkeypatch, capsys, "evaluate", "--hyp", hyp, "--ref", ref, "--out-dir", tmp_path / "ev")
    assert code == 0, err
    report = json.loads((tmp_path / "ev" / "hyp.txt.json").read_text(encoding="utf-8"))
    bleu, chrf, ter = sacrebleu_cli(ref, hyp)
    assert 20 < bleu < 95
    assert (report["bleu"], report["chrf"], report["ter"]) == pytest.approx((bleu, chrf, ter), abs=1e-4)
    assert "tok:13a" in report["bleu_signature"] and "case:mixed" in report["bleu_signature"]
    assert f"{bleu:.2f}" in stdout and report["chrf_signature"] in stdout


def test_evaluate_splits_report_table_and_samples(ckpt, small_data, monkeypatch, capsys):
    code, stdout, err = run_cli(monkeypatch, capsys, "evaluate", "-c", ckpt, "--split", "val",
                                "--split", "test_2016_flickr", "--beam", "1", "--samples", "2")
    assert code == 0, err
    eval_dir = ckpt.parent.parent / "eval"  # <run_dir>/eval by default
    for split in ("val", "test_2016_flickr"):
        report = json.loads((eval_dir / f"{split}.model.beam1.json").read_text(encoding="utf-8"))
        hyp_path = Path(report["hypotheses"])
        assert hyp_path == eval_dir / f"{split}.model.beam1.hyp"
        assert len(hyp_path.read_text(encoding="utf-8").splitlines()) == N
        bleu, chrf, ter = sacrebleu_cli(small_data / f"{split}.de", hyp_path)
        assert (report["bleu"], report["chrf"], report["ter"]) == pytest.approx((bleu, chrf, ter), abs=1e-4)
        assert report["decode"]["search"]["beam"] == 1 and report["sentences"] == N
        assert len(report["checkpoint_sha256"]) == 64 and report["sentences_per_s"] > 0
        assert re.search(rf"^{split}\s+\|\s+\d+\.\d\d \|", stdout, re.M), stdout  # a row of the table
    assert stdout.count("SRC: ") == 4 and stdout.count("REF: ") == 4 and stdout.count("HYP: ") == 4


def test_score_golden_and_checks():
    perfect = score(["Ein Hund läuft .", "Zwei Katzen"], ["Ein Hund läuft .", "Zwei Katzen"])
    assert (perfect.bleu, perfect.chrf, perfect.ter) == (pytest.approx(100.0), pytest.approx(100.0), 0.0)
    assert perfect.bleu_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")
    with pytest.raises(MTError, match="2 hypotheses but 1 references"):
        score(["a", "b"], ["a"])


def test_overrides_apply_the_rules_between_knobs():
    from mt.config import DecodeConfig

    base = DecodeConfig(search=SearchConfig(beam=2, alpha=0.6))
    assert apply_overrides(base, DecodeOverrides(alpha=1.0)).search.alpha == 1.0
    assert apply_overrides(base, DecodeOverrides(n_best=4)).search.beam == 4  # raised to n-best
    assert apply_overrides(DecodeConfig(search=SearchConfig(beam=5, n_best=3)), DecodeOverrides(beam=2)).search.n_best == 2  # capped by it
    with pytest.raises(MTError, match=r"^--n-best 4 exceeds --beam 3$"):
        apply_overrides(base, DecodeOverrides(beam=3, n_best=4))
    with pytest.raises(MTError, match=r"^--beam: must be at least 1, got 0$"):
        apply_overrides(base, DecodeOverrides(beam=0))
    with pytest.raises(MTError, match=r"^--seed: only applies to sampling; add --sampling$"):
        apply_overrides(base, DecodeOverrides(seed=3))
    sampling = DecodeConfig(search=SearchConfig(sampling=True))
    with pytest.raises(MTError, match=r"^--beam: sampling draws translations, it does not search"):
        apply_overrides(sampling, DecodeOverrides(beam=2))
    assert apply_overrides(sampling, DecodeOverrides(seed=3, n_best=4)).search.n_best == 4  # samples, whatever the beam


def test_overrides_name_each_value_as_its_user_wrote_it():
    """One set of messages: a command line's flags, a request's fields, the server's own flags."""
    from mt.config import DecodeConfig
    from mt.decode.overrides import REQUEST_FIELDS, SERVE_FLAGS

    base = DecodeConfig()
    with pytest.raises(MTError, match=r'^top_k: only applies to sampling; add "sampling": true$'):
        apply_overrides(base, DecodeOverrides(top_k=3), REQUEST_FIELDS)
    with pytest.raises(MTError, match=r"^n_best 7 exceeds beam 2$"):
        apply_overrides(base, DecodeOverrides(beam=2, n_best=7), REQUEST_FIELDS)
    with pytest.raises(MTError, match=r"^--max-batch-tokens: must be at least 1, got 0$"):
        apply_overrides(base, DecodeOverrides(max_tokens=0), SERVE_FLAGS)
    with pytest.raises(MTError, match=r"^--max-tokens: must be at least 1, got 0$"):
        apply_overrides(base, DecodeOverrides(max_tokens=0))
    assert DecodeOverrides.from_flags(protect="urls,numbers").protect == ("urls", "numbers")
    assert apply_overrides(base, DecodeOverrides.from_flags(protect="none", case=False)).text.protect == ()


def test_validation_uses_eval_mode_restores_it_and_scores_as_evaluate_does(loaded, tiny_run: Config):
    """The trainer's validation (mt.train.validate.Validator) scores the model in eval mode (dropout
    0.1 would change its loss and translations), leaves it in the mode it found it in, and its BLEU /
    chrF are `mt evaluate`'s score(translate_lines(...)) of the first valid_max_sentences val lines."""
    import contextlib

    from mt.train.validate import Validator

    model, tokenizer, _ = loaded
    cfg = dataclasses.replace(tiny_run, train=dataclasses.replace(tiny_run.train, valid_max_sentences=N, valid_beam=2))
    validator = Validator(cfg, tiny_run.run_dir, tokenizer, torch.device("cpu"), contextlib.nullcontext)
    model.eval()
    expected = validator(model)
    assert not model.training
    model.train()  # as the trainer calls it
    try:
        torch.manual_seed(1)
        got = validator(model)
        assert model.training
    finally:
        model.eval()
    assert got == expected
    src, ref = read_split(tiny_run.data, "val")
    decode = dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, beam=2, n_best=1, sampling=False))
    scores = score(translate_lines(model, tokenizer, src[:N], decode, device="cpu"), ref[:N])
    assert (expected["bleu"], expected["chrf"]) == (scores.bleu, scores.chrf)
    assert expected["chrf"] > 0  # the zeroed-EOS model writes words, so a wrong search would show


def test_evaluate_compare_translates_with_each_model(ckpt, small_data, tmp_path, monkeypatch, capsys):
    src, ref = tmp_path / "s.en", tmp_path / "r.de"
    src.write_text("\n".join(val_lines(small_data)[:6]) + "\n", encoding="utf-8")
    ref.write_text("\n".join(val_lines(small_data, "de")[:6]) + "\n", encoding="utf-8")
    code, out, err = run_cli(monkeypatch, capsys, "evaluate", "-c", ckpt, "--compare", ckpt, "--src", src, "--ref", ref,
                             "--beam", "1", "--out-dir", tmp_path / "eval")
    assert code == 0, err
    report = json.loads((tmp_path / "eval" / "comparison.s.en.json").read_text(encoding="utf-8"))
    assert [s["p_value"] for s in report["systems"]] == [None, 1.0]  # the same model: no difference at all
    assert "paired bootstrap" in out and (tmp_path / "eval" / "system2").is_dir()
