from paravt.rewards import AdvantageConfig, NFramesGate, RewardConfig, group_advantages, score

completion = (
    "<think>The overview is too coarse; I will look at the end of the video.</think>"
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 540, "end_time": 600}}'
    "</tool_call>"
    "<tool_response>A red square appears at 571 s.</tool_response>"
    "<answer>B</answer>"
)
r = score(completion, ground_truth="B", question_type="mcq", config=RewardConfig.paragrpo())
print(r.total, r.accuracy, r.format, r.tool)  # 2.8 1.0 1.0 0.8
assert abs(r.total - 2.8) < 1e-9

# One group of four rollouts of the same prompt -> GRPO advantages (reference scaling and norms)
rewards = [r.total, 1.0, 0.6, 0.0]
print(group_advantages(rewards, group_size=4, config=AdvantageConfig.paragrpo()))

# nFrames Gating: the overview budget K of a prompt, identical for all its rollouts and runs
gate = NFramesGate(choices=(4, 8, 16, 32, 64), seed=0)
print(gate.budget("video-0017/question-2"))
