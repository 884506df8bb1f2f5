"""`blindspot view`: the items behind every number, with their images, as a self-contained static site.

It reads a run's per-item records (`{results_dir}/tables/*_records.jsonl`, or one such file) and writes a
folder that opens from `file://` with no server and no network, and can be copied off a cluster: `index.html`,
the records as `data.js` (a script, since a browser reads no JSON file next to a page opened from disk), and
each image once as a thumbnail and a larger view (JPEG), made once and kept across builds. `--serve` serves
the folder on 127.0.0.1 for a tunnel. The page pages its list, so a paper-scale run opens quickly.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot.config import ConfigError
from blindspot.evaluate.records import read_records
from blindspot.io import write_text

RECORD_FILES = ("protobias_records.jsonl", "humblebench_records.jsonl")
THUMBNAIL_PX, FULL_PX = 256, 1024  # the longest side of a list's image, and of the one a click opens
# What a pair shows beside its prompt, as its records say ("" where the dataset does not).
PAIR_FIELDS = (
    "domain",
    "knob",
    "correct_value",
    "adversarial_value",
    "t2i",
    "correct_description",
    "adversarial_description",
)


def records_files(path: str | Path) -> list[Path]:
    """A records file, or every records file under a results folder; a ConfigError where there is none."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ConfigError(f"view {path}: no such file or folder")
    found = sorted(file for name in RECORD_FILES for file in path.rglob(name))
    if not found:
        raise ConfigError(f"view {path}: no per-item records ({' or '.join(RECORD_FILES)}) under it; run the workflow")
    return found


class Images:
    """Each source image once in the site's `img/` folder, as a thumbnail and a larger view: named by a hash of its
    path, size and time, so an image made by an earlier build is kept and a changed one is made again. A relative
    path is the run's, from where it ran: looked for from the current folder, then from each folder above the
    records file."""

    def __init__(self, out: Path, records: Path):
        self.folder, self.made = out / "img", {}
        self.bases = [Path.cwd(), *records.resolve().parents]
        self.folder.mkdir(parents=True, exist_ok=True)

    def __call__(self, source: str) -> dict[str, str] | None:
        """{"thumb": ..., "full": ...}, paths relative to the site; None for an image that is not there."""
        if not source:
            return None
        if source not in self.made:
            found = self._found(source)
            self.made[source] = self._make(found) if found is not None else None
        return self.made[source]

    def noise(self, record: dict[str, Any]) -> dict[str, str] | None:
        """The noise a HumbleBench record's setting showed instead of its image, made again as it was drawn
        (`settings.official_noise_image`, or `settings.noise_image` from the record's seed and the image's
        size); None where the record does not say which (a file written before it did)."""
        from PIL import Image

        from blindspot.humblebench.settings import noise_image, official_noise_image

        if record["noise"] == "official":
            return self._named("official-noise", official_noise_image)
        if record["noise"] != "per_question" or record["noise_seed"] is None:
            return None
        source = self._found(record["image"])
        if source is None:
            return None
        key = f"noise:{record['question_id']}:{record['noise_seed']}:{source.resolve()}"

        def draw() -> Any:
            with Image.open(source) as image:
                return noise_image(record["question_id"], int(record["noise_seed"]), image.size)

        return self._named(key, draw)

    def _found(self, source: str) -> Path | None:
        return next((base / source for base in self.bases if (base / source).is_file()), None)

    def _make(self, path: Path) -> dict[str, str] | None:
        from PIL import Image

        stat = path.stat()

        def read() -> Any:
            with Image.open(path) as image:
                return image.convert("RGB")

        return self._named(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}", read)

    def _named(self, key: str, image: Any) -> dict[str, str] | None:
        """The thumbnail and larger view of the image `image()` makes, named by a hash of `key` and made only
        where an earlier build did not; None for an image that cannot be read."""
        from PIL import UnidentifiedImageError

        name = hashlib.sha256(key.encode()).hexdigest()[:20]
        names = {"thumb": f"img/{name}_t.jpg", "full": f"img/{name}.jpg"}
        if all((self.folder.parent / name).is_file() for name in names.values()):
            return names
        try:
            made = image().convert("RGB")
        except (OSError, UnidentifiedImageError):
            return None
        for kind, size in (("full", FULL_PX), ("thumb", THUMBNAIL_PX)):
            made.thumbnail((size, size))
            made.save(self.folder.parent / names[kind], "JPEG", quality=85)
        return names


def _number(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def protobias_items(records: pd.DataFrame, images: Images) -> list[dict[str, Any]]:
    """One item per pair: its prompt and both descriptions, domain, knob and its two values, T2I model, both images,
    and each metric's two scores, margin and outcome."""
    items = []
    for pair_id, group in records.groupby("pair_id", sort=False):
        first = group.iloc[0]
        items.append(
            {
                "pair": pair_id,
                **{field: first[field] or "" for field in PAIR_FIELDS},
                "prompt": first["prompt"],
                "corr": images(first["corr_image"]),
                "adv": images(first["adv_image"]),
                "scores": {
                    row.metric: {
                        "corr": _number(row.corr_score),
                        "adv": _number(row.adv_score),
                        "margin": _number(row.margin),
                        "outcome": row.outcome,
                        "detail": [row.corr_detail, row.adv_detail],
                    }
                    for row in group.itertuples()
                },
            }
        )
    return items


def humblebench_items(records: pd.DataFrame, images: Images) -> list[dict[str, Any]]:
    """One item per answer: the image, the question and options as the setting showed them, the answer, how it was
    read and whether that is right."""
    columns = ["vlm", "setting", "question_id", "type", "question", "label", "nota", "answer", "reasoning"]
    columns += ["prediction", "reading", "outcome", "noise_image", "noise", "cut_off"]
    return [
        {
            **{column: record[column] for column in columns},
            "options": dict(record["options"] or {}),
            "image": images(record["image"]),
            "shown": images.noise(record) if record["noise_image"] else None,
        }
        for record in records.to_dict("records")
    ]


def build_site(paths: str | Path | Sequence[str | Path], out: str | Path) -> Path:
    """The site of the records at `paths` (each a records file or a results folder) in `out`; its index.html."""
    out = Path(out)
    data: dict[str, list[dict[str, Any]]] = {"protobias": [], "humblebench": []}
    paths = [paths] if isinstance(paths, str | Path) else paths
    for file in [file for path in paths for file in records_files(path)]:
        records = read_records(file)
        images = Images(out, file)
        kind = records.attrs["benchmark"]
        data[kind] += (protobias_items if kind == "protobias" else humblebench_items)(records, images)
    write_text(out / "data.js", "window.BLINDSPOT = " + json.dumps(data, ensure_ascii=False, default=str) + ";\n")
    write_text(out / "index.html", PAGE)
    return out / "index.html"


def serve(out: str | Path, port: int = 8000) -> None:
    """The site in `out` on http://127.0.0.1:`port`, until interrupted."""
    import functools
    import http.server

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        print(f"blindspot view: http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
        server.serve_forever()


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>blindspot: items</title>
<style>
body{font:14px system-ui,sans-serif;margin:0;color:#222}
header{position:sticky;top:0;background:#f4f4f4;padding:8px 12px;border-bottom:1px solid #ccc;z-index:1}
header label{margin-right:10px} nav button{margin-right:6px} nav button.on{font-weight:bold}
#count{margin-left:8px;color:#555} main{padding:8px 12px}
.item{display:flex;gap:12px;border-bottom:1px solid #e4e4e4;padding:8px 0}
.item img{width:160px;height:160px;object-fit:contain;background:#eee;cursor:zoom-in}
figure{margin:0;text-align:center} figcaption{color:#555}
.item .text{flex:1;min-width:0} .right{color:#1a7f37} .wrong,.unscored,.unreadable{color:#c0392b}
table.scores td{padding:0 8px 0 0} .desc{color:#444;font-size:13px}
.muted{color:#777} pre{white-space:pre-wrap;margin:4px 0}
#zoom{position:fixed;inset:0;background:rgba(0,0,0,.8);display:none;align-items:center;justify-content:center}
#zoom img{max-width:95vw;max-height:95vh}
</style></head><body>
<header><nav id="tabs"></nav><div id="filters"></div><span id="count"></span></header>
<main id="list"></main><button id="more">more</button>
<div id="zoom"><img alt="full image"></div>
<script src="data.js"></script>
<script>
const DATA = window.BLINDSPOT, PAGE = 50;
let kind = DATA.protobias.length ? "protobias" : "humblebench", shown = 0, rows = [];
const $ = (s) => document.querySelector(s);
const esc = (t) => String(t ?? "").replace(/[&<>"]/g, (c) => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));
const img = (i, alt) => i ? `<img loading="lazy" src="${i.thumb}" data-full="${i.full}" alt="${esc(alt)}">`
                           : `<span class="muted">(no image: ${esc(alt)})</span>`;
function distinct(values) { return [...new Set(values.filter((v) => v))].sort(); }
function select(id, label, values) {
  return `<label>${label} <select id="${id}"><option value="">all</option>` +
    values.map((v) => `<option>${esc(v)}</option>`).join("") + `</select></label>`;
}
function metricsOf(items) { return distinct(items.flatMap((p) => Object.keys(p.scores))); }
function filtersFor() {
  if (kind === "protobias") {
    const items = DATA.protobias, metrics = metricsOf(items);
    return select("domain", "domain", distinct(items.map((p) => p.domain))) +
      select("knob", "knob", distinct(items.map((p) => p.knob))) +
      select("t2i", "T2I model", distinct(items.map((p) => p.t2i))) +
      select("metric", "metric", metrics) + select("outcome", "outcome", ["right", "wrong", "unscored"]) +
      `<label>sort <select id="sort"><option value="">failures first</option>` +
      `<option value="margin">margin</option></select></label>` +
      select("a", "A right", metrics) + select("b", "B wrong", metrics);
  }
  const items = DATA.humblebench;
  return select("vlm", "VLM", distinct(items.map((a) => a.vlm))) +
    select("setting", "setting", distinct(items.map((a) => a.setting))) +
    select("type", "type", distinct(items.map((a) => a.type))) +
    select("outcome", "outcome", ["right", "wrong", "unreadable"]);
}
const val = (id) => ($("#" + id) || {}).value || "";
const failed = (s) => s.outcome !== "right";
function pick() {
  if (kind === "protobias") {
    const m = val("metric"), a = val("a"), b = val("b"), o = val("outcome");
    let found = DATA.protobias.filter((p) => ["domain", "knob", "t2i"].every((k) => !val(k) || p[k] === val(k)) &&
      (!m || p.scores[m]) &&
      (!o || Object.entries(p.scores).some(([k, s]) => (!m || k === m) && s.outcome === o)) &&
      (!a || (p.scores[a] && p.scores[a].outcome === "right")) && (!b || (p.scores[b] && failed(p.scores[b]))));
    const margin = (p) => Math.min(...Object.entries(p.scores).filter(([k]) => !m || k === m)
      .map(([, s]) => s.margin ?? -Infinity));
    const fails = (p) => Object.entries(p.scores).filter(([k, s]) => (!m || k === m) && failed(s)).length;
    return found.sort(val("sort") === "margin" ? (x, y) => margin(x) - margin(y) : (x, y) => fails(y) - fails(x));
  }
  const o = val("outcome");
  return DATA.humblebench.filter((r) => ["vlm", "setting", "type"].every((k) => !val(k) || r[k] === val(k)) &&
    (!o || r.outcome === o)).sort((x, y) => failed(y) - failed(x));
}
const knobHtml = (p) => p.knob && p.correct_value ? `${p.knob}: ${p.correct_value} → ${p.adversarial_value}` : p.knob;
const descriptionsHtml = (p) => p.correct_description ? `<div class="desc">D_c: ${esc(p.correct_description)}</div>
    <div class="desc">D_a: ${esc(p.adversarial_description)}</div>` : "";
function pairHtml(p) {
  const m = val("metric"), scores = Object.entries(p.scores).filter(([k]) => !m || k === m);
  return `<div class="item" data-pair="${esc(p.pair)}"><figure>${img(p.corr, "I_corr")}<figcaption>I_corr</figcaption>
    </figure><figure>${img(p.adv, "I_adv")}<figcaption>I_adv</figcaption></figure>
    <div class="text"><b>${esc(p.prompt)}</b><div class="muted">${[p.domain, knobHtml(p), p.t2i, p.pair]
      .filter((v) => v).map(esc).join(" · ")}</div>${descriptionsHtml(p)}
    <table class="scores">${scores.map(([k, s]) => `<tr class="score"><td>${esc(k)}</td><td>corr ${s.corr ?? "-"}</td>
    <td>adv ${s.adv ?? "-"}</td><td>margin ${s.margin === null ? "-" : s.margin.toFixed(4)}</td>
    <td class="${s.outcome}">${s.outcome}</td></tr>`).join("")}</table></div></div>`;
}
function answerHtml(r) {
  const options = Object.entries(r.options).map(([l, t]) => `${l}. ${t}`).join("\\n");
  const image = r.noise_image
    ? `<figure>${img(r.shown, "the noise shown")}<figcaption>shown: noise</figcaption></figure>` +
      `<figure>${img(r.image, "the question's image")}<figcaption>not shown</figcaption></figure>`
    : img(r.image, "the question's image");
  return `<div class="item" data-question="${esc(r.question_id)}">${image}
    <div class="text"><div class="muted">${esc(r.vlm)} · ${esc(r.setting)} · ${esc(r.type)} · ${esc(r.question_id)}
    ${r.noise_image ? ` · ${esc(r.noise || "")} noise shown instead of the image` : ""}</div>
    <b>${esc(r.question)}</b><pre>${esc(options)}</pre>
    <div>answer: <pre>${esc(r.answer)}</pre></div>
    <div>read (${esc(r.reading)}): <b>${esc(r.prediction || "nothing")}</b>, label ${esc(r.label)}:
    <span class="outcome ${r.outcome}">${r.outcome}</span>${r.cut_off ? " (cut off)" : ""}</div></div></div>`;
}
function render(reset) {
  if (reset) { rows = pick(); shown = 0; $("#list").innerHTML = ""; }
  const page = rows.slice(shown, shown + PAGE);
  $("#list").insertAdjacentHTML("beforeend", page.map(kind === "protobias" ? pairHtml : answerHtml).join(""));
  shown += page.length;
  $("#count").textContent = `${rows.length} ${kind === "protobias" ? "pair" : "answer"}${rows.length === 1 ? "" : "s"}`;
  $("#more").style.display = shown < rows.length ? "" : "none";
}
function tab(name) {
  kind = name;
  $("#tabs").innerHTML = ["protobias", "humblebench"].filter((k) => DATA[k].length)
    .map((k) => `<button class="${k === kind ? "on" : ""}" data-tab="${k}">${k} (${DATA[k].length})</button>`).join("");
  $("#filters").innerHTML = filtersFor();
  render(true);
}
document.addEventListener("change", (e) => { if (e.target.tagName === "SELECT") render(true); });
document.addEventListener("click", (e) => {
  if (e.target.dataset.tab) tab(e.target.dataset.tab);
  if (e.target.dataset.full) { $("#zoom img").src = e.target.dataset.full; $("#zoom").style.display = "flex"; }
  else if (e.target.closest("#zoom")) $("#zoom").style.display = "none";
});
$("#more").addEventListener("click", () => render(false));
tab(kind);
</script></body></html>
"""
