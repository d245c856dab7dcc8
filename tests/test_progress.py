"""headlab.progress: text lines on the website, tqdm.auto elsewhere."""

from __future__ import annotations

import io

import pytest

from headlab.progress import ENV, TextProgress, tqdm


def test_text_mode_prints_whole_lines(monkeypatch):
    monkeypatch.setenv(ENV, "text")
    out = io.StringIO()
    bar = tqdm(range(100), desc="train", file=out, mininterval=0)
    assert isinstance(bar, TextProgress)
    for step in bar:
        if step == 60:
            bar.set_postfix({"loss": "1.234"}, refresh=False)
    text = out.getvalue()
    assert "\r" not in text and text.endswith("\n")
    lines = text.splitlines()
    assert [line.split("%")[0].split()[-1] for line in lines] == ["0", "25", "50", "75", "100"]
    assert all(line.startswith("train:") and len(line) <= 78 for line in lines)
    assert "loss=1.234" in lines[-1] and "100/100" in lines[-1]


def test_long_lines_continue_on_a_second_line(monkeypatch):
    monkeypatch.setenv(ENV, "text")
    out = io.StringIO()
    bar = tqdm(range(10), desc="attn-only-2l", file=out, mininterval=0)
    for _ in bar:
        bar.set_postfix({"loss": "4.173", "rep": "4.17", "ind": "0.03", "prev": "0.43", "extra": "x" * 8},
                        refresh=False)
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 78 for line in lines), lines
    assert lines[-1].startswith("    ") and lines[-2].startswith("attn-only-2l: 100% 10/10")


def test_manual_updates_and_disable(monkeypatch):
    monkeypatch.setenv(ENV, "text")
    out = io.StringIO()
    bar = tqdm(total=3, desc="sweep", file=out, mininterval=0)
    for _ in range(3):
        bar.update(1)
    bar.close()
    assert out.getvalue().splitlines()[-1].startswith("sweep: 100%")
    quiet = io.StringIO()
    bar = tqdm(total=3, file=quiet, disable=True)
    bar.update(3)
    bar.close()
    assert quiet.getvalue() == ""


def test_default_is_tqdm_auto(monkeypatch):
    from tqdm.auto import tqdm as auto_tqdm

    monkeypatch.delenv(ENV, raising=False)
    bar = tqdm(total=1, file=io.StringIO())
    assert isinstance(bar, auto_tqdm) and not isinstance(bar, TextProgress)
    bar.close()
    monkeypatch.setenv(ENV, "widgets")
    with pytest.raises(ValueError, match="HEADLAB_PROGRESS='widgets': use 'text'"):
        tqdm(total=1)
