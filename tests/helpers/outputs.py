from pathlib import Path


def whitespace_outside_strings(text: str) -> list[int]:
    """Where JSON text has whitespace between its tokens (constrained decoding allows none, with the
    separators "," and ":" on both backends)."""
    found, in_string, escaped = [], False, False
    for at, char in enumerate(text):
        if in_string:
            escaped, in_string = (not escaped and char == "\\"), in_string and (escaped or char != '"')
        elif char == '"':
            in_string = True
        elif char.isspace():
            found.append(at)
    return found


def half_written_temps(entry: Path, key: str, text: str) -> tuple[Path, Path]:
    """Two temporaries beside a cache `entry` (named as atomic_path names them), each holding `text`: a
    killed writer's of the entry itself, and another job's, of another key in the same folder, being written."""
    entry.parent.mkdir(parents=True)
    left = entry.with_name(f".{entry.name}.0123abcd.tmp")
    others = entry.with_name(f".{key[:2]}{'0' * 14}.json.4567cdef.tmp")
    for temporary in (left, others):
        temporary.write_text(text)
    return left, others
