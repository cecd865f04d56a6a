"""Readers for the reference ParaVT parquet schemas, and sentinel-path materialisation.

RL rows (`paravt_rl_*.parquet`):
    prompt      list of {"role", "content"} (or its JSON text); a `<video>` placeholder in a content
                string marks where the video goes
    videos      list of {"video": path, ...}
    extra_info  JSON text or struct with `answer` and `question_type` (mcq, tvg, oe, ...)

SFT rows (lmms-engine chat format):
    messages    list (or JSON text) of {"role", "content"}; content is a string or a list of parts
                {"type": "text", "text"} / {"type": "video_url", "video_url": {"url", ...}} /
                {"type": "image_url", "image_url": {"url"}}; assistant turns hold the tool calls,
                `tool` (or user `<tool_response>`) turns hold the tool responses. A `<video>`
                placeholder in a string content stands for the row's video (as in RL rows).
    videos      optional, as in RL rows.
    frames      optional {"start_s", "end_s", "num_frames"} (`paravt-tools synth`): the placeholder
                shows an overview of the whole video or a crop of that window.

Video paths in the released parquet files are sentinel-relative (`longvt_source/...`, `museg/...`,
`selfqa/...`): `materialize` prefixes a local root and the `file://` scheme. Rows whose video is
missing are skipped and counted per source; a malformed row raises `ParaVTDataError` naming the
file, the row and the column.

One file because both row formats (ours and the released parquet files) go through one validation
path with one error type naming the file, row and column.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from paravt.core import content_text

SENTINEL_PREFIXES: tuple[str, ...] = (
    "longvt_source/",
    "museg/charades/",
    "museg/et_instruct_164k/",
    "selfqa/",
)
VIDEO_PLACEHOLDER = "<video>"
RL_COLUMNS = ("prompt", "videos", "extra_info")
SFT_COLUMNS = ("messages",)


class ParaVTDataError(ValueError):
    """A data file that cannot be used; the message names the file, row and column."""


# --------------------------------------------------------------------------------------------------
# Paths


def is_sentinel(path: str) -> bool:
    raw = path.removeprefix("file://")
    return any(raw.startswith(p) for p in SENTINEL_PREFIXES)


def source_of(path: str) -> str:
    """The source bucket of a video path, for missing-file counts (`longvt_source`, `selfqa`...)."""
    raw = path.removeprefix("file://")
    for prefix in SENTINEL_PREFIXES:  # also after materialisation: /root/selfqa/x.mp4
        if raw.startswith(prefix) or "/" + prefix in raw:
            return prefix.split("/", 1)[0]
    return "local"


def resolve_video(path: str, *, root: Path | None, base_dir: Path) -> Path:
    """Where a row's video lives on disk: `file://` stripped; sentinel paths under `root`;
    other relative paths next to the parquet file (`base_dir`)."""
    raw = path.removeprefix("file://")
    p = Path(raw)
    if p.is_absolute():
        return p
    if root is not None and is_sentinel(raw):
        return (root / raw).resolve()
    return (base_dir / raw).resolve()


def materialize_path(path: str, root: Path, missing: Counter[str]) -> str:
    """`file://<root>/<sentinel path>` for a sentinel path (counting it when the file is missing);
    any other path passes through unchanged."""
    if not path or not is_sentinel(path):
        return path
    raw = path.removeprefix("file://")
    full = (root / raw).resolve()
    if not full.exists():
        missing[source_of(raw)] += 1
    return "file://" + str(full)


# --------------------------------------------------------------------------------------------------
# Reading


def parquet_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand directories to their `*.parquet` files (sorted); every path must exist."""
    out: list[Path] = []
    for item in paths:
        p = Path(item)
        if p.is_dir():
            found = sorted(p.glob("*.parquet"))
            if not found:
                raise ParaVTDataError(f"{p}: directory holds no *.parquet files")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise ParaVTDataError(
                f"{p}: no such parquet file or directory (generate it, e.g. with `paravt-tools "
                "synth`, or fix data.parquet in the recipe)"
            )
    return out


def _read_table(path: Path, required: Sequence[str]) -> pa.Table:
    try:
        table = pq.read_table(str(path))
    except (OSError, pa.ArrowException) as exc:
        raise ParaVTDataError(f"{path}: not a readable parquet file ({exc})") from None
    missing = [c for c in required if c not in table.schema.names]
    if missing:
        raise ParaVTDataError(
            f"{path}: has no {', '.join(repr(c) for c in missing)} column "
            f"(columns: {', '.join(table.schema.names)})"
        )
    return table


def _json_or_value(value: Any, where: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ParaVTDataError(f"{where}: is a string but not valid JSON ({exc.msg})") from None
    return value


def _messages(value: Any, where: str) -> list[dict[str, Any]]:
    value = _json_or_value(value, where)
    if not isinstance(value, list) or not value:
        raise ParaVTDataError(f"{where}: expected a non-empty list of messages, got {value!r:.80}")
    for i, m in enumerate(value):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ParaVTDataError(
                f"{where}[{i}]: a message needs 'role' and 'content', got {m!r:.80}"
            )
        if m["role"] not in ("system", "user", "assistant", "tool"):
            raise ParaVTDataError(f"{where}[{i}]: unknown role {m['role']!r}")
    return value


def _videos(value: Any, where: str) -> list[str]:
    value = _json_or_value(value, where)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ParaVTDataError(f"{where}: expected a list of {{'video': path}}, got {value!r:.80}")
    out = []
    for i, v in enumerate(value):
        path = v.get("video") if isinstance(v, dict) else v if isinstance(v, str) else None
        if not isinstance(path, str) or not path:
            raise ParaVTDataError(f"{where}[{i}]: expected {{'video': path}}, got {v!r:.80}")
        out.append(path)
    return out


@dataclass
class RLExample:
    """One RL prompt: its chat messages (with `<video>`), its video on disk and its ground truth."""

    key: str
    messages: list[dict[str, Any]]
    video: Path
    answer: str
    question_type: str
    extra_info: dict[str, Any] = field(default_factory=dict)

    @property
    def question(self) -> str:
        """The last user message's text without the video placeholder."""
        for m in reversed(self.messages):
            if m["role"] == "user":
                return content_text(m["content"]).replace(VIDEO_PLACEHOLDER, "").strip()
        return ""

    @property
    def system(self) -> str | None:
        for m in self.messages:
            if m["role"] == "system":
                return content_text(m["content"])
        return None


@dataclass
class SFTExample:
    """One supervised conversation, with every video part resolved to a local file."""

    key: str
    messages: list[dict[str, Any]]
    videos: list[Path] = field(default_factory=list)
    # Which frames a `<video>` placeholder in the text stands for (the `frames` column of
    # `paravt-tools synth` rows): {"start_s", "end_s", "num_frames"}; None = the recipe's overview.
    frames: dict[str, Any] | None = None


@dataclass
class LoadReport:
    """What a reader kept and what it skipped, per source bucket."""

    rows: int = 0
    kept: int = 0
    missing_by_source: Counter[str] = field(default_factory=Counter)

    @property
    def skipped(self) -> int:
        return self.rows - self.kept

    def __str__(self) -> str:
        if not self.missing_by_source:
            return f"{self.kept} rows, none skipped"
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(self.missing_by_source.items()))
        return f"{self.kept} of {self.rows} rows kept; skipped for missing videos ({counts})"


def read_rl_rows(
    paths: Iterable[str | Path], *, root: str | Path | None = None, max_rows: int | None = None
) -> tuple[list[RLExample], LoadReport]:
    """Read RL parquet files into `RLExample`s; rows whose video is missing are skipped and counted.

    Raises `ParaVTDataError` naming file, row and column for malformed rows.
    """
    root_path = Path(root) if root is not None else None
    examples: list[RLExample] = []
    report = LoadReport()
    for path in parquet_files(paths):
        table = _read_table(path, RL_COLUMNS)
        cols = {c: table.column(c).to_pylist() for c in RL_COLUMNS}
        for row in range(table.num_rows):
            if max_rows is not None and report.rows >= max_rows:
                return examples, report
            report.rows += 1
            where = f"{path.name} row {row}"
            messages = _messages(cols["prompt"][row], f"{where} column 'prompt'")
            videos = _videos(cols["videos"][row], f"{where} column 'videos'")
            if not videos:
                raise ParaVTDataError(f"{where} column 'videos': the row has no video")
            info = _json_or_value(cols["extra_info"][row], f"{where} column 'extra_info'")
            # a struct column gives every row every field: a row without an answer reads None,
            # which would be graded as the answer "None"
            if not isinstance(info, dict) or info.get("answer") is None:
                raise ParaVTDataError(
                    f"{where} column 'extra_info': expected a mapping with a non-null 'answer' "
                    f"and 'question_type', got {info!r:.80}"
                )
            video = resolve_video(videos[0], root=root_path, base_dir=path.parent)
            if not video.is_file():
                report.missing_by_source[source_of(videos[0])] += 1
                continue
            key = str(info.get("id") or info.get("index") or f"{path.stem}:{row}")
            examples.append(
                RLExample(
                    key=key,
                    messages=messages,
                    video=video,
                    answer=str(info["answer"]),
                    question_type=str(info.get("question_type") or "oe"),
                    extra_info=info,
                )
            )
            report.kept += 1
    return examples, report


def _media_parts(messages: list[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    for m in messages:
        if isinstance(m.get("content"), list):
            for part in m["content"]:
                if isinstance(part, dict) and part.get("type") in (
                    "video_url",
                    "image_url",
                    "video",
                ):
                    yield part


def _part_url(part: dict[str, Any]) -> str | None:
    kind = part.get("type")
    if kind == "video":
        return part.get("video") if isinstance(part.get("video"), str) else None
    sub = (part.get(kind) if isinstance(kind, str) else None) or {}
    return sub.get("url") if isinstance(sub, dict) else None


def read_sft_rows(
    paths: Iterable[str | Path], *, root: str | Path | None = None, max_rows: int | None = None
) -> tuple[list[SFTExample], LoadReport]:
    """Read SFT parquet files into `SFTExample`s (video urls resolved to local paths).

    Rows that reference a missing video are skipped and counted per source.
    """
    root_path = Path(root) if root is not None else None
    examples: list[SFTExample] = []
    report = LoadReport()
    for path in parquet_files(paths):
        table = _read_table(path, SFT_COLUMNS)
        messages_col = table.column("messages").to_pylist()
        videos_col = table.column("videos").to_pylist() if "videos" in table.schema.names else None
        frames_col = table.column("frames").to_pylist() if "frames" in table.schema.names else None
        for row in range(table.num_rows):
            if max_rows is not None and report.rows >= max_rows:
                return examples, report
            report.rows += 1
            where = f"{path.name} row {row}"
            messages = _messages(messages_col[row], f"{where} column 'messages'")
            if not any(m["role"] == "assistant" for m in messages):
                raise ParaVTDataError(
                    f"{where} column 'messages': no assistant message, nothing to supervise"
                )
            missing_source: str | None = None
            videos: list[Path] = []
            for part in _media_parts(messages):
                url = _part_url(part)
                if not url:
                    raise ParaVTDataError(
                        f"{where} column 'messages': a {part.get('type')} part has no url"
                    )
                local = resolve_video(url, root=root_path, base_dir=path.parent)
                if not local.is_file():
                    missing_source = source_of(url)
                    break
                part["_local_path"] = str(local)
                if part.get("type") != "image_url":
                    videos.append(local)
            if missing_source is None and videos_col is not None:
                for url in _videos(videos_col[row], f"{where} column 'videos'"):
                    local = resolve_video(url, root=root_path, base_dir=path.parent)
                    if not local.is_file():
                        missing_source = source_of(url)
                        break
                    if local not in videos:
                        videos.append(local)
            if missing_source is not None:
                report.missing_by_source[missing_source] += 1
                continue
            frames = None
            if frames_col is not None and frames_col[row] is not None:
                frames = _json_or_value(frames_col[row], f"{where} column 'frames'")
                if not isinstance(frames, dict):
                    raise ParaVTDataError(
                        f"{where} column 'frames': expected {{'start_s', 'end_s', 'num_frames'}}, "
                        f"got {frames!r:.80}"
                    )
            if not videos and any(
                isinstance(m["content"], str) and VIDEO_PLACEHOLDER in m["content"]
                for m in messages
                if m["role"] != "assistant"
            ):
                raise ParaVTDataError(
                    f"{where} column 'messages': a <video> placeholder but no video in the row "
                    "(add it to the 'videos' column)"
                )
            examples.append(SFTExample(f"{path.stem}:{row}", messages, videos, frames))
            report.kept += 1
    return examples, report


# --------------------------------------------------------------------------------------------------
# Materialisation


def _walk_encoded(value: str, walk: Callable[[Any], Any], *, containers_only: bool) -> Any:
    """A cell stored as JSON text: decoded, walked and encoded again. Text that is not JSON stays
    as written; with `containers_only` so does JSON that is no array or object (a message's plain
    text that happens to parse, such as a number)."""
    try:
        decoded = json.loads(value)
    except json.JSONDecodeError:
        return value
    if containers_only and not isinstance(decoded, (list, dict)):
        return value
    return json.dumps(walk(decoded), ensure_ascii=False)


def _walk_messages(value: Any, root: Path, missing: Counter[str]) -> Any:
    if isinstance(value, str):
        return _walk_encoded(
            value, lambda v: _walk_messages(v, root, missing), containers_only=True
        )
    if isinstance(value, list):
        return [_walk_messages(v, root, missing) for v in value]
    if isinstance(value, dict):
        out = dict(value)
        kind = out.get("type")
        if kind in ("video_url", "image_url") and isinstance(out.get(kind), dict):
            sub = out[kind]
            if sub.get("url"):
                out[kind] = {**sub, "url": materialize_path(sub["url"], root, missing)}
        if kind == "video" and isinstance(out.get("video"), str):
            out["video"] = materialize_path(out["video"], root, missing)
        for key in ("content", "messages"):
            if key in out:
                out[key] = _walk_messages(out[key], root, missing)
        return out
    return value


def _walk_videos(value: Any, root: Path, missing: Counter[str]) -> Any:
    if isinstance(value, str):
        return _walk_encoded(value, lambda v: _walk_videos(v, root, missing), containers_only=False)
    if not isinstance(value, list):
        return value
    return [
        {**v, "video": materialize_path(v["video"], root, missing)}
        if isinstance(v, dict) and isinstance(v.get("video"), str)
        else v
        for v in value
    ]


def materialize_parquet(src: Path, dst: Path, root: Path) -> dict[str, int]:
    """Rewrite the sentinel paths of one parquet file (schema unchanged); missing files per source."""
    try:
        table = pq.read_table(str(src))
    except (OSError, pa.ArrowException) as exc:
        raise ParaVTDataError(f"{src}: not a readable parquet file ({exc})") from None
    missing: Counter[str] = Counter()
    columns = {name: table.column(name).to_pylist() for name in table.schema.names}
    for name in ("messages", "prompt"):
        if name in columns:
            columns[name] = [_walk_messages(v, root, missing) for v in columns[name]]
    if "videos" in columns:
        columns["videos"] = [_walk_videos(v, root, missing) for v in columns["videos"]]
    dst.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns, schema=table.schema), str(dst))
    return dict(missing)


def materialize_dir(root: Path, parquet_dir: Path, output_dir: Path) -> dict[str, dict[str, int]]:
    """Materialise every `*.parquet` of `parquet_dir` into `output_dir`; writes and returns the
    per-file report of missing videos per source (`materialize_report.json`)."""
    root, parquet_dir, output_dir = Path(root), Path(parquet_dir), Path(output_dir)
    if not root.is_dir():
        raise ParaVTDataError(
            f"--root {root} is not a directory (where ParaVT-Source was extracted)"
        )
    sources = sorted(parquet_dir.glob("*.parquet")) if parquet_dir.is_dir() else []
    if not sources:
        raise ParaVTDataError(f"--parquet-dir {parquet_dir} holds no *.parquet files")
    if output_dir.resolve() == parquet_dir.resolve():
        raise ParaVTDataError("--output-dir must differ from --parquet-dir (inputs are kept as is)")
    output_dir.mkdir(parents=True, exist_ok=True)
    report = {src.name: materialize_parquet(src, output_dir / src.name, root) for src in sources}
    (output_dir / "materialize_report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
