"""The paper's prompts (Appendix E), kept as versioned template files, and their filling."""

from apm.prompts.render import (
    PROMPT_VERSION,
    probe_prompt,
    read_fields,
    read_probe,
    said_text,
    summary_prompts,
    system_prompt,
    template,
    turn_text,
)

__all__ = [
    "PROMPT_VERSION", "probe_prompt", "read_fields", "read_probe", "said_text", "summary_prompts", "system_prompt",
    "template", "turn_text",
]
