"""ParaVT's tool path inside other RL frameworks: the whole episode (overview, parallel
`crop_video` calls run by paravt-tools, weight-sharing sub-agents, the answer), not only the reward.

`agent` holds what every framework shares: an `Engine` over a framework's own token generation
(`CallbackEngine`), the task of one dataset row (`paravt_task`), and an episode cut into the
token samples a trainer consumes (`episode_samples`). The framework modules (`verl`, `openrlhf`,
`trl`) import their framework inside, so this package imports without any of them.
"""
