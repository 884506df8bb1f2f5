"""Schemas of every table the workflow writes (parquet, pyarrow types)."""

import pyarrow as pa

_s = pa.string()
_f = pa.float64()

# A seed: one taxonomy entry in one scene, with the knob that the adversarial description changes.
_SEED_COLUMNS = [
    "seed_id",
    "domain",
    "subcategory",
    "label",
    "qualifier",
    "correct_instance",
    "adversarial_instance",
    "scene",
    "aux_element",
    "knob",
    "correct_value",
    "adversarial_value",
    "draft_neutral",
    "draft_correct",
    "draft_adversarial",
    "qualifier_realization",
    "correct_realization",
    "adversarial_realization",
    "added_entries",
    "taxonomy_sha256",
    "sample_seed",
]
SEEDS = pa.schema([(name, pa.int64() if name == "sample_seed" else _s) for name in _SEED_COLUMNS])

# What every model-written row records about how it was made.
_GENERATION_PROVENANCE = [
    ("model", _s),  # registry name
    ("model_id", _s),  # hub id or built:<name>
    ("model_revision", _s),
    ("template_version", _s),
    ("sampling", _s),  # JSON of the sampling settings and seed
    ("raw_output", _s),
    ("status", _s),  # ok, or the failure kind
    ("reason", _s),  # human-readable detail for a failure; empty when ok
]

RAW_TRIPLETS = pa.schema(
    [
        ("triplet_id", _s),
        ("seed_id", _s),
        ("domain", _s),
        ("generator", _s),
        ("neutral_prompt", _s),
        ("correct_description", _s),
        ("adversarial_description", _s),
        *_GENERATION_PROVENANCE,
    ]
)

JUDGMENTS = pa.schema(
    [
        ("triplet_id", _s),
        ("domain", _s),
        ("generator", _s),
        ("judge", _s),
        ("accept", pa.bool_()),
        ("verdict_reason", _s),  # the judge's reason code (ok, malformed, wrong_domain, ...)
        ("explanation", _s),
        *_GENERATION_PROVENANCE,
    ]
)

TRIPLETS = pa.schema(
    [
        ("triplet_id", _s),
        ("seed_id", _s),
        ("domain", _s),
        ("generator", _s),
        ("subcategory", _s),
        ("label", _s),
        ("qualifier", _s),
        ("correct_instance", _s),
        ("adversarial_instance", _s),
        ("scene", _s),
        ("aux_element", _s),
        ("knob", _s),
        ("correct_value", _s),
        ("adversarial_value", _s),
        ("added_entries", _s),  # the seed's parts the paper does not name (taxonomy `source: added`)
        ("neutral_prompt", _s),
        ("correct_description", _s),
        ("adversarial_description", _s),
        ("generator_model_id", _s),
        ("generate_template_version", _s),
        ("judges", _s),  # comma-separated registry names of the judges that all accepted
    ]
)

PROMPT_QUALITY = pa.schema(
    [
        ("triplet_id", _s),
        ("domain", _s),
        ("sim_t_dc", _f),
        ("sim_t_da", _f),
        ("sim_dc_da", _f),
        ("nli_t_dc", _s),  # predicted label, premise T, hypothesis D_c
        ("nli_t_da", _s),
        ("contradiction_dc_da", _f),  # P(contradiction) averaged over both directions
        ("nli_dc_da", _s),  # argmax of the label distribution averaged over both directions
        ("embedding_model_id", _s),
        ("nli_model_id", _s),
    ]
)

RENDERS = pa.schema(
    [
        ("image_id", _s),  # hash of model, revision, description, seed and settings
        ("triplet_id", _s),
        ("role", _s),  # corr (rendered from D_c) or adv (from D_a)
        ("description", _s),
        ("t2i", _s),
        ("model_id", _s),
        ("model_revision", _s),
        ("seed", pa.int64()),
        ("steps", pa.int64()),
        ("guidance", _f),
        ("height", pa.int64()),
        ("width", pa.int64()),
        ("settings", _s),  # JSON of everything that decides the pixels
        ("path", _s),
        ("sha256", _s),
    ]
)

VLM_SCORES = pa.schema(
    [
        ("image_id", _s),
        ("triplet_id", _s),
        ("role", _s),
        ("t2i", _s),
        ("vlm", _s),
        ("model_id", _s),
        ("model_revision", _s),
        ("template_version", _s),
        ("expected_score", _f),  # sum of k * P(k) over k = 1..10
        ("argmax_score", pa.int64()),
        ("valid_mass", _f),  # probability the model put on any answer 1..10
        ("probabilities", pa.list_(_f)),  # P(1), ..., P(10), renormalised
        ("text", _s),  # what the model wrote, greedy
        ("text_score", pa.int64()),  # the score read from the text; null when there is none
    ]
)

PAIRS = pa.schema(
    [
        ("pair_id", _s),  # hash of the two image ids
        ("triplet_id", _s),
        ("t2i", _s),
        ("seed", pa.int64()),
        ("corr_image_id", _s),
        ("corr_path", _s),
        ("adv_image_id", _s),
        ("adv_path", _s),
        ("vlm_scores", _s),  # JSON: {vlm: {"corr": score, "adv": score}}
        ("min_corr_score", _f),
        ("min_adv_score", _f),
        ("kept", pa.bool_()),
    ]
)

IMAGE_QUALITY = pa.schema(
    [
        ("pair_id", _s),
        ("t2i", _s),
        ("metric", _s),  # registry name of the pyiqa metric
        ("higher_is_better", pa.bool_()),
        ("corr_score", _f),
        ("adv_score", _f),
    ]
)

_TRIPLET_FIELDS = [f for f in TRIPLETS if f.name not in ("triplet_id", "domain")]
BENCHMARK_PAIRS = pa.schema([f for f in PAIRS if f.name != "kept"] + [("domain", _s), ("split", _s), *_TRIPLET_FIELDS])

ANNOTATION_IMAGES = pa.schema(
    [
        ("image_id", _s),
        ("path", _s),
        ("pair_id", _s),
        ("triplet_id", _s),
        ("domain", _s),
        ("t2i", _s),
        ("role", _s),
        ("description", _s),  # the image's own description, which the annotator scores it against
        ("vlm_scores", _s),  # JSON: {vlm: score}
        ("mean_vlm_score", _f),
        ("accepted", pa.bool_()),
    ]
)

ANNOTATION_PAIRS = pa.schema(
    [
        ("pair_id", _s),
        ("triplet_id", _s),
        ("domain", _s),
        ("t2i", _s),
        ("neutral_prompt", _s),
        ("left_role", _s),  # which image is shown on the left: corr or adv
        ("left_image_id", _s),
        ("left_path", _s),
        ("right_image_id", _s),
        ("right_path", _s),
    ]
)

# One row per benchmark pair and metric: M(T, I_corr) and M(T, I_adv), raw and normalised to [0, 1].
METRIC_SCORES = pa.schema(
    [
        ("pair_id", _s),
        ("domain", _s),
        ("metric", _s),  # registry name
        ("model_id", _s),
        ("model_revision", _s),
        ("prompt", _s),  # the neutral prompt T
        ("corr_raw", _f),
        ("adv_raw", _f),
        ("corr_score", _f),
        ("adv_score", _f),
        ("corr_detail", _s),
        ("adv_detail", _s),
    ]
)

# HumbleBench: one row per multiple-choice question, whatever its source.
HUMBLE_QUESTIONS = pa.schema(
    [
        ("question_id", _s),
        ("source", _s),  # release, benchmark or scene_graph
        ("question", _s),  # the stem, without the options
        ("options", _s),  # JSON list of option texts in letter order; "None of the above" among them
        ("label", _s),  # the correct letter
        ("type", _s),  # Object, Attribute or Relation
        ("image_path", _s),
        ("origin", _s),  # JSON: where it came from (release file, pair and role, scene-graph image)
        ("verified", pa.bool_()),  # checked by a person (the release, keep/modify) or built from verified facts
    ]
)

# Figure 2's numbers: per panel (the correct answer, NOTA apart; the question type), each value's questions.
HUMBLE_DISTRIBUTIONS = pa.schema([("panel", _s), ("value", _s), ("questions", pa.int64()), ("percent", _f)])

# Table 9 as the paper lays it out: a row per measure (candidates, kept %, ..., final, final %), a column per type.
HUMBLE_FILTERING = pa.schema([("measure", _s), ("Object", _f), ("Attribute", _f), ("Relation", _f), ("Total", _f)])

# One row per question x VLM x setting: the question as shown, and both readings of the answer.
HUMBLE_ANSWERS = pa.schema(
    [
        ("question_id", _s),
        ("vlm", _s),  # registry name
        ("model_id", _s),
        ("model_revision", _s),
        ("setting", _s),
        ("type", _s),
        ("options", _s),  # JSON list, as shown
        ("label", _s),  # the correct letter as shown
        ("nota", _s),  # NOTA's letter as shown
        ("letter_map", _s),  # JSON: original letter -> shown letter ("" when removed)
        ("noise_image", pa.bool_()),
        ("letter_probabilities", _s),  # JSON list: P(letter) at the first answer token, letters as shown
        ("letter_mass", _f),  # their sum: how much the model meant to answer with a letter
        ("prediction_logits", _s),  # the most probable shown letter
        ("text", _s),  # the generated answer (a reasoning model's after its reasoning)
        ("prediction_text", _s),  # the letter the text names; empty when it names none or several
        ("reasoning", _s),  # a reasoning model's text before the answer ("" when none ended it)
        ("stopped", pa.bool_()),  # the answer ended on its own (end of sequence), not at the token budget
        ("cut_off", pa.bool_()),  # the budget cut it off: not stopped, and no marker ended the reasoning
        ("template_version", _s),  # the setting's template
        ("prompt_version", _s),  # the protocol's prompt around it
        ("protocol", _s),  # official or uniform (`humblebench.protocols`); "" for answers made elsewhere
    ]
)

# Table 7's human study: one row per annotator and item, the question as its setting shows it.
HUMAN_STUDY = pa.schema(
    [
        ("annotator", _s),
        ("item_id", _s),  # setting:question_id
        ("setting", _s),  # the original setting, or the stress one (NOTA-only)
        ("question_id", _s),
        ("type", _s),
        ("image_path", _s),
        ("question", _s),
        ("options", _s),  # JSON list, as shown
        ("letters", _s),  # each shown option's letter, e.g. "ABDE" (NOTA-only's gap)
    ]
)

# Table 7's human answers: a person's letter for a question in a setting ("" when they gave none).
HUMAN_ANSWERS = pa.schema([("annotator", _s), ("question_id", _s), ("setting", _s), ("answer", _s)])


# Per-item records (JSON lines, one object a line): what a model did on each item, to read or diff. Each
# field's meaning is in its metadata, from which docs/outputs.md shows it.
def _field(name: str, kind: pa.DataType, meaning: str, nullable: bool = False, added: bool = False) -> pa.Field:
    """A record's field; an `added` one came after the first records files were written, so a file without it
    is still read (its value null)."""
    metadata = {"description": meaning} | ({"added": "true"} if added else {})
    return pa.field(name, kind, nullable=nullable or added, metadata=metadata)


def is_added(field: pa.Field) -> bool:
    return (field.metadata or {}).get(b"added") == b"true"


_letters = pa.map_(_s, _s)

# ProtoBias: one record per test pair a metric scored.
PROTOBIAS_RECORDS = pa.schema(
    [
        _field("metric", _s, "the metric's name under `evaluation.metrics`"),
        _field("pair_id", _s, "the pair"),
        _field("domain", _s, "its domain"),
        _field("knob", _s, "the attribute I_adv changes (count, colour tone, ...), where the dataset says", True),
        _field("correct_value", _s, "the knob's value in I_corr, where the dataset says", added=True),
        _field("adversarial_value", _s, "the knob's value in I_adv (the prototypical one)", added=True),
        _field("triplet_id", _s, "the triplet the pair was rendered from: the unit its intervals resample", added=True),
        _field("t2i", _s, "the text-to-image model that rendered both images, where the dataset says", added=True),
        _field("prompt", _s, "the neutral prompt T"),
        _field("correct_description", _s, "D_c, which I_corr was rendered from, where the dataset says", added=True),
        _field("adversarial_description", _s, "D_a, which I_adv was rendered from, where the dataset says", added=True),
        _field("corr_image", _s, "I_corr's file: semantically correct, less prototypical"),
        _field("adv_image", _s, "I_adv's file: more prototypical, one attribute wrong"),
        _field("corr_raw", _f, "M(T, I_corr) as the metric gave it; null when it gave none", True),
        _field("adv_raw", _f, "M(T, I_adv) as the metric gave it; null when it gave none", True),
        _field("corr_score", _f, "M(T, I_corr) normalised to [0, 1]", True),
        _field("adv_score", _f, "M(T, I_adv) normalised to [0, 1]", True),
        _field("margin", _f, "corr_score - adv_score: how far the metric preferred I_corr (<= 0: it did not)", True),
        _field("correct", pa.bool_(), "Table 3's decision: M(T, I_corr) > M(T, I_adv) on the raw scores"),
        _field("outcome", _s, "right, wrong (a tie too), or unscored (no score: a failure, as in Table 3)"),
        _field("corr_detail", _s, "what the metric wrote about I_corr (a judge's answer, a failure's reason)"),
        _field("adv_detail", _s, "what the metric wrote about I_adv"),
    ]
)

# HumbleBench: one record per question, VLM and setting.
HUMBLE_RECORDS = pa.schema(
    [
        _field("vlm", _s, "the VLM's registry name"),
        _field("setting", _s, "the setting under `humblebench.settings`"),
        _field("question_id", _s, "the question"),
        _field("type", _s, "Object, Attribute or Relation"),
        _field("question", _s, "the stem, without the options"),
        _field("image", _s, "the question's image file"),
        _field("noise_image", pa.bool_(), "the setting showed a noise image instead of it"),
        _field("noise", _s, "which: official (one image for all) or per_question (drawn from noise_seed)", added=True),
        _field("noise_seed", pa.int64(), "the seed per-question noise was drawn from", added=True),
        _field("options", _letters, "the options as shown: {letter: text}, NOTA among them"),
        _field("label", _s, "the correct letter as shown"),
        _field("nota", _s, "NOTA's letter as shown"),
        _field("answer", _s, "what the VLM wrote (a reasoning model's text after its reasoning)"),
        _field("reasoning", _s, "a reasoning model's text before the answer (empty when none)"),
        _field("stopped", pa.bool_(), "the answer ended on its own, not at the token budget"),
        _field("cut_off", pa.bool_(), "the budget cut the answer off inside its reasoning"),
        _field("letter_probabilities", pa.map_(_s, _f), "P(letter) at the first answer token per shown letter", True),
        _field("prediction_text", _s, "the letter the answer's text names, by today's parser (empty: none)"),
        _field("prediction_logits", _s, "the most probable shown letter"),
        _field("reading", _s, "which of the two the metrics read (`humblebench.reading`): text or logits"),
        _field("prediction", _s, "the letter as the metrics read it; empty when unreadable (not a shown letter)"),
        _field("correct", pa.bool_(), "the prediction is the label"),
        _field("outcome", _s, "right, wrong (another letter) or unreadable (no letter: wrong too)"),
    ]
)

# The records' schemas by their kind in `targets.PATHS`.
RECORDS = {"protobias_records": PROTOBIAS_RECORDS, "humble_records": HUMBLE_RECORDS}


def json_kind(kind: pa.DataType) -> str:
    """What a record's field holds in JSON: string, number, boolean, or an object of them."""
    if pa.types.is_map(kind):
        return f"object of {json_kind(kind.item_type)}s"
    return "string" if pa.types.is_string(kind) else "boolean" if pa.types.is_boolean(kind) else "number"


def _fits(value: object, kind: pa.DataType) -> bool:
    if pa.types.is_map(kind):
        return isinstance(value, dict) and all(v is None or _fits(v, kind.item_type) for v in value.values())
    if pa.types.is_string(kind):
        return isinstance(value, str)
    if pa.types.is_boolean(kind):
        return isinstance(value, bool)
    return isinstance(value, int | float) and not isinstance(value, bool)


def record_problem(record: dict, schema: pa.Schema) -> str | None:
    """What keeps `record` (a JSON object) from being a record of `schema`: the fields it lacks, or the first
    field that holds another kind of value; None when it is one."""
    missing = [field.name for field in schema if field.name not in record and not is_added(field)]
    if missing:
        return f"lacks the field(s) {', '.join(missing)}"
    for field in schema:
        value = record.get(field.name)
        if not (_fits(value, field.type) or (value is None and field.nullable)):
            return f"field {field.name} holds {value!r}, not a {json_kind(field.type)}"
    return None
