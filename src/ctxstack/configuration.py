"""How each component reads its configuration from the environment (pydantic-settings).

Every component that has environment variables — the budget, the LLM roles, the storage,
the chat service, the proxy — declares them in one :class:`EnvSettings` subclass: a field
per setting, its variable as the field's ``validation_alias`` (an ``AliasChoices`` for a
fallback chain, first set variable wins), its default, its bounds, and a docstring that
``docs/configuration.md`` is generated from (``scripts/gen-config-docs``; a test
fails when the file is stale; :mod:`ctxstack.cli.config_reference` writes it).

The contract shared by all of them:

* ``Cls.from_env(env=None)`` reads ``env`` (default ``os.environ``) and nothing else: no
  ``.env`` file, no secrets directory. Constructing ``Cls(field=...)`` directly reads no
  environment at all (tests and embedding code build settings from values);
* a value is stripped of surrounding whitespace, and an empty one counts as unset;
* only fields with a variable are read (a field without one is filled by code), by the
  variable's exact name;
* a value of the wrong kind is a :class:`~ctxstack.errors.ConfigError` whose message names
  the variable, says what was expected and repeats what it got.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, ClassVar, Self

from pydantic import AliasChoices, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from ctxstack.errors import ConfigError

_READING: ContextVar[Mapping[str, str] | None] = ContextVar("ctxstack_settings_env",
                                                            default=None)


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping, reading only the fields
    that name a variable, values stripped, empty ones unset."""

    def __init__(self, settings_cls: type[EnvSettings], env: Mapping[str, str]) -> None:
        self._env = env
        self._keep_empty = settings_cls.keep_empty
        super().__init__(settings_cls, case_sensitive=True)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        out: dict[str, str | None] = {}
        for name, value in self._env.items():
            text = value.strip() if isinstance(value, str) else ""
            if text or (self._keep_empty and isinstance(value, str)):
                out[name] = text
        return out

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        if field.validation_alias is None:
            return None, field_name, False
        return super().get_field_value(field, field_name)


class EnvSettings(BaseSettings):
    """Base of every component's settings (see the module docstring for the contract)."""

    model_config = SettingsConfigDict(
        frozen=True, extra="forbid", validate_by_name=True, validate_by_alias=True,
        use_attribute_docstrings=True,
    )

    component: ClassVar[str] = ""
    """The heading of this class's table in ``docs/configuration.md``."""
    keep_empty: ClassVar[bool] = False
    """True: a variable set to an empty value is a value (and, for a number, an error)
    rather than unset."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        env = _READING.get()
        if env is None or not issubclass(settings_cls, EnvSettings):
            return (init_settings,)
        return (init_settings, _MappingEnvSource(settings_cls, env))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **values: Any) -> Self:
        """Read the settings from ``env`` (default ``os.environ``); ``values`` win over it.

        Raises:
            ConfigError: a variable has a value of the wrong kind, or a required one is
                missing; the message names the variable.
        """
        env = os.environ if env is None else env
        token = _READING.set(env)
        try:
            return cls(**values)
        except ValidationError as exc:
            raise cls.config_error(exc, env) from None
        finally:
            _READING.reset(token)

    @classmethod
    def config_error(cls, exc: ValidationError, env: Mapping[str, str]) -> ConfigError:
        """The :class:`ConfigError` for a failed validation: every missing variable, or the
        first bad value, named."""
        missing = [_where(cls, err["loc"], env) for err in exc.errors()
                   if err["type"] == "missing"]
        if missing:
            return ConfigError(f"{cls.component or cls.__name__}: set {', '.join(missing)}")
        err = exc.errors()[0]
        msg = str(err["msg"]).removeprefix("Value error, ")
        return ConfigError(f"{_where(cls, err['loc'], env)}: {msg} (got {err.get('input')!r})")


def lowercase(value: Any) -> Any:
    """A ``BeforeValidator`` for case-insensitive choices (``TOKEN`` reads as ``token``)."""
    return value.strip().lower() if isinstance(value, str) else value


def env_vars(field: FieldInfo) -> tuple[str, ...]:
    """The variables a field reads, in the order they are tried (``()``: not read)."""
    alias = field.validation_alias
    if alias is None:
        return ()
    if isinstance(alias, str):
        return (alias,)
    if isinstance(alias, AliasChoices):
        return tuple(choice for choice in alias.choices if isinstance(choice, str))
    return ()


def _where(cls: type[EnvSettings], loc: tuple[int | str, ...], env: Mapping[str, str]) -> str:
    """The variable an error location stands for: of a field's variables the one that is
    set, or all of them (``A or B``) when none is."""
    if not loc:
        return cls.__name__
    head = str(loc[0])
    field = cls.model_fields.get(head)
    if field is None:
        field = next((f for f in cls.model_fields.values() if head in env_vars(f)), None)
    if field is None or not env_vars(field):
        return head
    names = env_vars(field)
    for name in names:
        value = env.get(name)
        if isinstance(value, str) and value.strip():
            return name
    return " or ".join(names)

