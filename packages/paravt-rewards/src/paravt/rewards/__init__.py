"""paravt.rewards: PARA-GRPO rewards, nFrames Gating and GRPO advantage math.

Light by design: needs only paravt-core and pydantic (no torch, no numpy). Framework adapters for
TRL, verl, AReaL and OpenRLHF live in `paravt.rewards.integrations`.
"""

from paravt.core import installed_version
from paravt.rewards.accuracy import (
    exact_match,
    extract_choice,
    mcq_accuracy,
    normalize_text,
    parse_window,
    temporal_iou,
    token_f1,
)
from paravt.rewards.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageConfig,
    advantage_scales,
    anchor_advantages,
    anchor_fractions,
    batch_normalize,
    group_advantages,
    shape_rewards,
    token_advantages,
)
from paravt.rewards.anchoring import (
    AnchorPart,
    anchor_token_parts,
    anchor_token_rewards,
    structural_token_positions,
)
from paravt.rewards.config import (
    EVIDENCE_GAMMA,
    PRESETS,
    AccuracyMode,
    AnchoringForm,
    FormatCredit,
    JudgeConfig,
    PresetName,
    RewardConfig,
    ToolCredit,
)
from paravt.rewards.gating import NFramesGate
from paravt.rewards.judge import JudgeResult, LLMJudge
from paravt.rewards.score import RewardBreakdown, score, score_episode
from paravt.rewards.structure import Structure, episode_structure
from paravt.rewards.terms import (
    FormatTerms,
    answer_text,
    format_terms,
    is_chat_spam,
    is_runaway_repetition,
    tool_reward,
)

__version__ = installed_version("paravt-rewards")

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "EVIDENCE_GAMMA",
    "PRESETS",
    "AccuracyMode",
    "AdvantageConfig",
    "AnchorPart",
    "AnchoringForm",
    "FormatCredit",
    "FormatTerms",
    "JudgeConfig",
    "JudgeResult",
    "LLMJudge",
    "NFramesGate",
    "PresetName",
    "RewardBreakdown",
    "RewardConfig",
    "Structure",
    "ToolCredit",
    "__version__",
    "advantage_scales",
    "anchor_advantages",
    "anchor_fractions",
    "anchor_token_parts",
    "anchor_token_rewards",
    "answer_text",
    "batch_normalize",
    "episode_structure",
    "exact_match",
    "extract_choice",
    "format_terms",
    "group_advantages",
    "is_chat_spam",
    "is_runaway_repetition",
    "mcq_accuracy",
    "normalize_text",
    "parse_window",
    "score",
    "score_episode",
    "shape_rewards",
    "structural_token_positions",
    "temporal_iou",
    "token_advantages",
    "token_f1",
    "tool_reward",
]
