"""Tools an agent can call: definition, the ``@tool`` decorator, and a registry that runs them.

A :class:`Tool` is a name, a description, a JSON-schema ``parameters`` object (what the
model sees through native tool calling) and an async :meth:`Tool.call`. The ``@tool``
decorator builds one from a typed Python function: the schema comes from the signature's
type hints (through a pydantic model, so arguments are validated by the same model that
produced the schema) and the descriptions from the docstring's summary and ``Args:``
section.

Running a tool is the registry's job (:meth:`ToolRegistry.execute`), and it never raises
for anything the *model* got wrong or the *tool* did wrong: an unknown tool, arguments that
do not validate, an exception inside the tool, or a timeout all become a
:class:`ToolOutcome` whose ``content`` is an error text the model can read and act on. A
crashing tool must not end an agent run; the model can usually recover (fix its arguments,
try another tool) if it is told what went wrong. Only an invalid *definition* (duplicate
name, untyped parameter, bad schema) raises :class:`~ctxstack.errors.ToolError`, at
registration time, where a developer sees it.

Sync functions run in a worker thread so they cannot block the event loop. A timed-out
sync tool's thread cannot be killed; it finishes in the background and its result is
discarded.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, get_type_hints, overload

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from ctxstack.errors import ToolArgumentsError, ToolError
from ctxstack.messages import ToolCall
from ctxstack.messages._model import RAW_ARGUMENTS_KEY
from ctxstack.protocol import ToolSpec

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
PREVIEW_CHARS = 300
"""Characters of a tool result kept in traces and events (the model gets all of it)."""

ToolFunction = Callable[..., Any]
ArgumentValidator = Callable[[Mapping[str, Any]], dict[str, Any]]


class Tool:
    """A callable capability offered to the model.

    Args:
        name: what the model calls it (letters, digits, ``_`` and ``-``, at most 64 —
            the limit OpenAI-compatible APIs enforce).
        description: what it does and when to use it (the model reads this).
        parameters: a JSON-schema object describing the arguments.
        fn: the implementation, sync or async, called with the validated arguments as
            keyword arguments.
        validator: turns raw arguments into validated keyword arguments, raising
            :class:`ToolArgumentsError` naming what is wrong. Defaults to a structural check
            against ``parameters`` (required keys, no unknown keys when
            ``additionalProperties`` is false, JSON types of the top-level properties).
        timeout: seconds this tool may run; ``None`` uses the agent's default.

    Raises:
        ToolError: the name or the schema is invalid.
    """

    def __init__(
        self,
        name: str,
        description: str,
        parameters: Mapping[str, Any],
        fn: ToolFunction,
        *,
        validator: ArgumentValidator | None = None,
        timeout: float | None = None,
    ) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ToolError(
                f"tool name {name!r}: use 1-64 letters, digits, '_' or '-' "
                "(what OpenAI-compatible APIs accept)"
            )
        if not isinstance(parameters, Mapping) or parameters.get("type") != "object":
            raise ToolError(f"tool {name!r}: parameters must be a JSON schema with type 'object'")
        props = parameters.get("properties", {})
        if not isinstance(props, Mapping):
            raise ToolError(f"tool {name!r}: parameters.properties must be an object")
        required = parameters.get("required", [])
        if not isinstance(required, list) or any(r not in props for r in required):
            raise ToolError(
                f"tool {name!r}: parameters.required must list names of declared properties"
            )
        if not callable(fn):
            raise ToolError(f"tool {name!r}: fn is not callable")
        if timeout is not None and not timeout > 0:
            raise ToolError(f"tool {name!r}: timeout must be positive, got {timeout!r}")
        self.name = name
        self.description = (description or "").strip()
        self.parameters: dict[str, Any] = dict(parameters)
        self.fn = fn
        self.timeout = timeout
        self._validate: ArgumentValidator = validator or (
            lambda args: _check_against_schema(name, self.parameters, args)
        )

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r})"

    def spec(self) -> ToolSpec:
        """The OpenAI ``tools`` entry for native tool calling."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def validate_arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validated keyword arguments, or :class:`ToolArgumentsError` saying what is wrong."""
        if not isinstance(arguments, Mapping):
            raise ToolArgumentsError(
                f"arguments must be a JSON object, got {type(arguments).__name__}"
            )
        return self._validate(arguments)

    async def call(self, arguments: Mapping[str, Any]) -> Any:
        """Validate ``arguments`` and run the tool (sync functions in a worker thread).

        Raises whatever the tool raises, and :class:`ToolArgumentsError` for bad arguments;
        :meth:`ToolRegistry.execute` is what turns those into readable results.
        """
        kwargs = self.validate_arguments(arguments)
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(**kwargs)
        result = await asyncio.to_thread(self.fn, **kwargs)
        if inspect.isawaitable(result):  # a sync wrapper returning a coroutine
            return await result
        return result


# --------------------------------------------------------------------------- @tool


@overload
def tool(fn: ToolFunction, /) -> Tool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, timeout: float | None = None
) -> Callable[[ToolFunction], Tool]: ...


def tool(
    fn: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
) -> Tool | Callable[[ToolFunction], Tool]:
    """Make a :class:`Tool` from a typed function: ``@tool`` or ``@tool(name=..., timeout=...)``.

    Every parameter needs a type hint (the schema is built from it); ``*args`` and
    ``**kwargs`` are refused because the model could not know what to pass. Parameter
    descriptions come from the docstring's ``Args:`` section (Google style; Sphinx
    ``:param x:`` lines and NumPy ``Parameters`` sections work too); the tool description
    defaults to the docstring's first paragraph.

    Raises:
        ToolError: an untyped or variadic parameter, an unresolvable hint, or no
            description at all.
    """

    # Hints that name classes local to the defining function (common in tests and
    # notebooks, and unavoidable under ``from __future__ import annotations``) resolve only
    # in the caller's namespace, so it is captured here — as pydantic does for its models.
    def build(func: ToolFunction) -> Tool:
        return _tool_from_function(func, name=name, description=description, timeout=timeout,
                                   localns=dict(sys._getframe(1).f_locals))

    if fn is not None:
        return _tool_from_function(fn, name=name, description=description, timeout=timeout,
                                   localns=dict(sys._getframe(1).f_locals))
    return build


def _tool_from_function(
    fn: ToolFunction,
    *,
    name: str | None,
    description: str | None,
    timeout: float | None,
    localns: dict[str, Any] | None = None,
) -> Tool:
    tool_name: str = name or str(getattr(fn, "__name__", ""))
    summary, arg_docs = parse_docstring(inspect.getdoc(fn) or "")
    desc = description or summary
    if not desc:
        raise ToolError(f"tool {tool_name!r}: give it a docstring or a description")
    try:
        hints = get_type_hints(fn, localns=localns)
    except Exception as exc:  # NameError for unresolvable forward references, …
        raise ToolError(f"tool {tool_name!r}: cannot resolve type hints ({exc})") from exc
    fields: dict[str, Any] = {}
    names: dict[str, str] = {}  # model field name -> parameter name
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolError(f"tool {tool_name!r}: *args/**kwargs parameters are not supported")
        if param.name not in hints:
            raise ToolError(f"tool {tool_name!r}: parameter {param.name!r} needs a type hint")
        default = ... if param.default is param.empty else param.default
        # Field names are prefixed and aliased so a parameter called ``json`` or
        # ``schema`` cannot shadow a BaseModel attribute; the schema shows the alias.
        field_name = f"p_{param.name}"
        names[field_name] = param.name
        fields[field_name] = (
            hints[param.name],
            Field(default, alias=param.name, description=arg_docs.get(param.name)),
        )
    try:
        model: type[BaseModel] = create_model(
            f"{tool_name}_arguments",
            __config__=ConfigDict(extra="forbid", protected_namespaces=()),
            **fields,
        )
        schema = model.model_json_schema()
    except Exception as exc:
        raise ToolError(f"tool {tool_name!r}: cannot build a schema ({exc})") from exc
    _drop_titles(schema)

    def validate(arguments: Mapping[str, Any]) -> dict[str, Any]:
        try:
            parsed = model.model_validate(dict(arguments))
        except ValidationError as exc:
            raise ToolArgumentsError(describe_validation_error(exc)) from None
        return {names[f]: getattr(parsed, f) for f in names}

    return Tool(tool_name, desc, schema, fn, validator=validate, timeout=timeout)


def _drop_titles(schema: Any) -> None:
    """Remove pydantic's auto-generated ``title`` keys: tokens the model does not need."""
    if isinstance(schema, dict):
        if isinstance(schema.get("title"), str):
            schema.pop("title")
        props = schema.get("properties")
        for key, value in schema.items():
            if key == "properties" and isinstance(props, dict):
                for sub in props.values():
                    _drop_titles(sub)
            else:
                _drop_titles(value)
    elif isinstance(schema, list):
        for item in schema:
            _drop_titles(item)


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The summary (first paragraph, joined) and per-argument descriptions of a docstring.

    Parsed by ``docstring_parser`` (Google, Sphinx ``:param x:``, NumPy and Epydoc
    styles, detected per docstring); a description over several lines is joined into one
    line, and the ``*`` / ``**`` of a variadic parameter's name is dropped.
    """
    parsed = docstring_parser.parse(doc)
    summary = parsed.short_description or ""
    if summary and parsed.long_description and not parsed.blank_after_short_description:
        # a summary wrapped over several lines: the parser keeps only its first line
        summary += "\n" + parsed.long_description.split("\n\n", 1)[0]
    args = {param.arg_name.lstrip("*"): _one_line(param.description or "")
            for param in parsed.params}
    return _one_line(summary), args


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
    "null": (type(None),),
}


def _check_against_schema(
    tool_name: str, schema: Mapping[str, Any], arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """A structural check for hand-written schemas (no full JSON-Schema engine needed)."""
    props: Mapping[str, Any] = schema.get("properties", {})
    problems: list[str] = []
    for key in schema.get("required", []):
        if key not in arguments:
            problems.append(f"{key}: Field required")
    if schema.get("additionalProperties") is False:
        problems.extend(f"{k}: Extra inputs are not permitted" for k in arguments
                        if k not in props)
    for key, value in arguments.items():
        spec = props.get(key)
        if not isinstance(spec, Mapping):
            continue
        if "enum" in spec and value not in spec["enum"]:
            problems.append(f"{key}: must be one of {spec['enum']!r}")
        kinds = spec.get("type")
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if isinstance(kinds, list) and kinds:
            allowed = tuple(t for k in kinds for t in _JSON_TYPES.get(k, (object,)))
            is_bool = isinstance(value, bool)
            if not isinstance(value, allowed) or (is_bool and "boolean" not in kinds):
                problems.append(f"{key}: expected {' or '.join(kinds)}, got {_json_type(value)}")
    if problems:
        raise ToolArgumentsError("; ".join(problems))
    return dict(arguments)


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    for name, types in _JSON_TYPES.items():
        if isinstance(value, types):
            return name
    return type(value).__name__


def describe_validation_error(exc: ValidationError) -> str:
    """One ``field: problem`` clause per error, in words a model can act on."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "arguments"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


# --------------------------------------------------------------------------- registry


class ToolOutcome(BaseModel):
    """What running one tool call produced: the text for the model and the trace facts.

    ``content`` is what goes into the tool message (an error text when ``error`` is set);
    ``error`` is a short machine-friendly reason (``"unknown_tool"``, ``"invalid_arguments"``,
    ``"timeout"`` or ``"exception: <Type>"``), ``None`` on success.
    """

    model_config = ConfigDict(frozen=True)

    call_id: str
    tool: str
    arguments: dict[str, Any]
    content: str
    error: str | None = None
    duration_s: float = 0.0

    @property
    def preview(self) -> str:
        return preview(self.content)


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis marker."""
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more chars]"


def render_result(value: Any) -> str:
    """A tool's return value as message text (JSON for structured values)."""
    if isinstance(value, str):
        return value
    if value is None:
        return "(no output)"
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


class ToolRegistry:
    """The tools an agent may use, by unique name.

    Raises:
        ToolError: on a duplicate name or something that is not a tool.
    """

    def __init__(self, tools: Iterable[Tool | ToolFunction] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            self.register(item)

    def register(self, item: Tool | ToolFunction) -> Tool:
        """Add a :class:`Tool` (a plain typed function is wrapped with :func:`tool`)."""
        new = item if isinstance(item, Tool) else _as_tool(item)
        if new.name in self._tools:
            raise ToolError(f"duplicate tool name {new.name!r}")
        self._tools[new.name] = new
        return new

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self, names: Iterable[str] | None = None) -> list[ToolSpec]:
        """Native tool specs, for all tools or the given subset (unknown names skipped)."""
        chosen = self._tools.values() if names is None else (
            self._tools[n] for n in names if n in self._tools
        )
        return [t.spec() for t in chosen]

    async def execute(self, call: ToolCall, *, default_timeout: float | None = 30.0) -> ToolOutcome:
        """Run one tool call; every failure becomes an outcome, never an exception.

        ``asyncio.CancelledError`` still propagates: cancelling the agent cancels its tools.
        """
        started = time.perf_counter()

        def outcome(content: str, error: str | None = None) -> ToolOutcome:
            return ToolOutcome(
                call_id=call.id, tool=call.name, arguments=dict(call.arguments),
                content=content, error=error, duration_s=time.perf_counter() - started,
            )

        found = self._tools.get(call.name)
        if found is None:
            available = ", ".join(self._tools) or "(none)"
            return outcome(
                f"Error: there is no tool named {call.name!r}. Available tools: {available}.",
                "unknown_tool",
            )
        if set(call.arguments) == {RAW_ARGUMENTS_KEY}:
            # The client keeps arguments that were not a JSON object under this key.
            schema = json.dumps(found.parameters, ensure_ascii=False)
            return outcome(
                f"Error: the arguments for tool {call.name!r} were not a valid JSON object: "
                f"{preview(str(call.arguments[RAW_ARGUMENTS_KEY]), 200)!r}. Send a JSON object "
                f"matching this schema: {schema}",
                "invalid_arguments",
            )
        timeout = found.timeout if found.timeout is not None else default_timeout
        try:
            value = await asyncio.wait_for(found.call(call.arguments), timeout)
        except ToolArgumentsError as exc:
            schema = json.dumps(found.parameters, ensure_ascii=False)
            return outcome(
                f"Error: invalid arguments for tool {call.name!r}: {exc}. "
                f"Expected arguments (JSON schema): {schema}",
                "invalid_arguments",
            )
        except TimeoutError:
            return outcome(
                f"Error: tool {call.name!r} timed out after {timeout:g}s and was abandoned. "
                "Try different arguments or another approach.",
                "timeout",
            )
        except Exception as exc:
            return outcome(
                f"Error: tool {call.name!r} failed: {type(exc).__name__}: {exc}",
                f"exception: {type(exc).__name__}",
            )
        return outcome(render_result(value))


def _as_tool(item: object) -> Tool:
    if callable(item):
        return tool(item)
    raise ToolError(f"not a tool or a function: {item!r}")


def as_registry(tools: ToolRegistry | Iterable[Tool | ToolFunction]) -> ToolRegistry:
    """Accept a registry as is, or build one from tools / typed functions."""
    return tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)

