"""Plot data that benchmark modules hand to the runner, and its PNG rendering.

A module exposes ``plot_data(quick) -> dict[str, dict]``: plot id → a :class:`PlotData`
mapping (plain dicts so a module need not import this file). The runner validates each
entry here and draws it with matplotlib's Agg backend (no display needed).

Four ids are canonical: the report always has a slot for them, with fixed titles and axis
labels, and says which module should provide the data when none did. Any other id is drawn
too, with the labels its data carries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator


class PlotData(BaseModel):
    """One figure: shared ``x`` values and one or more named series over them.

    ``kind="bar"`` draws grouped bars (``x`` are category names); ``"line"`` draws one line
    per series (``x`` numeric). ``None`` in a series is a missing point.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["line", "bar"] = "line"
    x: list[float] | list[str]
    series: dict[str, list[float | None]]
    title: str | None = None
    xlabel: str | None = None
    ylabel: str | None = None
    logx: bool = False
    logy: bool = False
    ymin: float | None = None
    """Lower end of the y axis (e.g. 0 for percentages); automatic when None."""

    @model_validator(mode="after")
    def _lengths_match(self) -> Self:
        if not self.series:
            raise ValueError("series: at least one series is needed")
        for name, values in self.series.items():
            if len(values) != len(self.x):
                raise ValueError(
                    f"series[{name!r}]: {len(values)} values for {len(self.x)} x positions"
                )
        return self


class CanonicalPlot(BaseModel):
    """A plot the report always mentions: its labels and who is expected to provide it."""

    model_config = ConfigDict(frozen=True)

    title: str
    xlabel: str
    ylabel: str
    provider: str


CANONICAL_PLOTS: dict[str, CanonicalPlot] = {
    "estimator_throughput": CanonicalPlot(
        title="Token estimator throughput by text type",
        xlabel="text type", ylabel="MB/s", provider="bench_tokens_accuracy",
    ),
    "guard_overhead": CanonicalPlot(
        title="ContextGuard overhead vs conversation length",
        xlabel="messages in the conversation", ylabel="ms per check", provider="bench_guard",
    ),
    "dbmemory_load": CanonicalPlot(
        title="DbMemory load latency vs stored messages",
        xlabel="stored messages", ylabel="ms per load", provider="bench_dbmemory",
    ),
    "tokens_per_iteration": CanonicalPlot(
        title="Tokens sent per ReAct iteration, with and without the guard",
        xlabel="iteration", ylabel="input tokens", provider="bench_agent",
    ),
}


def parse_plots(module: str, raw: object) -> dict[str, PlotData]:
    """Validate what ``plot_data()`` returned; errors name the module and the plot id."""
    if not isinstance(raw, dict):
        raise TypeError(f"{module}.plot_data() returned {type(raw).__name__}, expected a dict")
    out: dict[str, PlotData] = {}
    for plot_id, data in raw.items():
        if not isinstance(plot_id, str) or not plot_id.replace("_", "").isalnum():
            raise ValueError(f"{module}.plot_data(): plot id {plot_id!r} must be a word")
        try:
            out[plot_id] = data if isinstance(data, PlotData) else PlotData.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                (".".join(str(x) for x in e["loc"]) + ": " if e["loc"] else "")
                + e["msg"].removeprefix("Value error, ")
                for e in exc.errors()
            )
            raise ValueError(f"{module}.plot_data()[{plot_id!r}]: {problems}") from None
    return out


def _tick(x: float | str) -> str:
    if isinstance(x, str):
        return x
    if x >= 1000 and x % 1000 == 0:
        return f"{x / 1000:,.0f}K"
    return f"{x:g}"


def render(plot_id: str, data: PlotData, path: Path) -> Path:
    """Draw ``data`` to ``path`` (PNG) and return the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    canon = CANONICAL_PLOTS.get(plot_id)
    title = data.title or (canon.title if canon else plot_id.replace("_", " "))
    xlabel = data.xlabel or (canon.xlabel if canon else "")
    ylabel = data.ylabel or (canon.ylabel if canon else "")

    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    try:
        if data.kind == "bar":
            n = len(data.series)
            width = 0.8 / n
            positions = list(range(len(data.x)))
            for i, (name, values) in enumerate(data.series.items()):
                offsets = [p - 0.4 + width * (i + 0.5) for p in positions]
                heights = [v if v is not None else 0.0 for v in values]
                ax.bar(offsets, heights, width=width, label=name)
            ax.set_xticks(positions, [str(x) for x in data.x], rotation=15)
        else:
            for name, values in data.series.items():
                xs: list[float | str] = []
                ys: list[float] = []
                x_values: list[float | str] = list(data.x)
                for x, y in zip(x_values, values, strict=True):
                    if y is not None:
                        xs.append(x)
                        ys.append(y)
                ax.plot(xs, ys, marker="o", label=name)
        if data.logx:
            ax.set_xscale("log")
        if data.kind == "line" and len(data.x) <= 12:
            # Label the measured points themselves: log-scale default ticks are unreadable.
            ax.set_xticks([float(x) for x in data.x], [_tick(x) for x in data.x])
            ax.minorticks_off()
        if data.ymin is not None:
            ax.set_ylim(bottom=data.ymin)
        if data.logy:
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if len(data.series) > 1 or data.kind == "line":
            ax.legend(fontsize="small")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
