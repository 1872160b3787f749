"""The message model: chat messages, typed content parts, tool calls, tool-turn repair
and conversion to and from the OpenAI chat wire format.

Everything a caller needs is re-exported here; the modules behind it are private.
"""

from ctxstack.messages._model import (
    ChatMessage,
    Role,
    ToolCall,
    from_openai_messages,
    to_openai_messages,
)
from ctxstack.messages._parts import (
    AudioPart,
    ContentPart,
    FilePart,
    ImagePart,
    ImageURL,
    RefusalPart,
    TextPart,
)
from ctxstack.messages._tool_turns import repair_tool_turns, tool_turns_valid

__all__ = [
    "AudioPart",
    "ChatMessage",
    "ContentPart",
    "FilePart",
    "ImagePart",
    "ImageURL",
    "RefusalPart",
    "Role",
    "TextPart",
    "ToolCall",
    "from_openai_messages",
    "repair_tool_turns",
    "to_openai_messages",
    "tool_turns_valid",
]
