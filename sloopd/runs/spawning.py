"""Starting one child of a stage: its prompt, its credential, its HOME, its launcher.

Every agent, command and panel seat starts here, so every one gets the same
treatment: a credential minted for it that dies with it, an allowlisted
environment, its run's own HOME, and the launcher's sandbox.  What the launcher
is handed is one ``StageLaunch`` value (sloopd.proc.stage_io); what comes back
is its lines, on the loop, and its ``StageEnd``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sloopd.core.cost_budgets import UNPRICED_STREAMS
from sloopd.core.paths import Layout
from sloopd.flows import prompts
from sloopd.flows.flow import Stage
from sloopd.flows.presets import configured_model
from sloopd.git.run_branches import repository_identity
from sloopd.proc.child_files import ChildFiles
from sloopd.proc.lines import OutputBudget
from sloopd.proc.overlay import Overlay
from sloopd.proc.sandbox import PROMPT_PATH
from sloopd.proc.stage_io import Launcher, LaunchRefused, Limits, Placement, StageEnd, StageLaunch
from sloopd.runs import budget as budgets
from sloopd.runs.records import RunRecords
from sloopd.runs.runstate import ActiveRun, RunFacts
from sloopd.runs.stop import stops_children
from sloopd.store import TicketExtra
from sloopd.util import memory
from sloopd.vendor import stream_claude
from sloopd.vendor import usage as usages
from sloopd.vendor.pricing import CostReader
from sloopd.vendor.usage import Usage
from sloopd.views import feedback
from sloopd.worker.credentials import Credentials

# Stored output a flooding child may leave in the sink's batch before it is
# written: with 64 KiB lines, the sink's 1000-record batch alone is 64 MiB.
FLUSH_AFTER_BYTES = 4 << 20
# A child that printed this much leaves free heap behind: hand it back to the OS.
TRIM_AFTER_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class Ran:
    """The child started and ended: how, and what its stream said it spent (None: no
    stream, or nothing it recognised)."""

    end: StageEnd
    usage: Usage | None


@dataclass(frozen=True, slots=True)
class NotStarted:
    """The child never ran (its argv cannot be passed, its launcher or its node refused
    it, or its work was refused on the way back): why, for the stage's reason."""

    reason: str


class ChildStarter:
    """Starts each child of a stage: the daemon's side of the ``Launcher`` seam.

    It resolves a ``StageLaunch`` from the run's admitted configuration, mints and
    revokes the child's credential, and takes its lines (the log sink, the output
    budget, the usage its stream reports); where the child runs is the launcher's.
    """

    def __init__(
        self,
        layout: Layout,
        records: RunRecords,
        credentials: Credentials,
        socket_path: Callable[[str], Path],
        launchers: Mapping[str, Launcher],
        overlay_of: Callable[[str], Overlay | None] = lambda _run: None,
    ) -> None:
        self.layout = layout
        self.records = records
        self.credentials = credentials
        self.socket_path = socket_path
        self.launchers = launchers  # by the placement's ``where``
        # A run's copy-on-write checkout, as its workspace made it (None: a whole one).
        self.overlay_of = overlay_of
        # The child's HOME and token, made anew for each child.
        self.files = ChildFiles(layout.state_dir, lambda: repository_identity(layout.repo))

    def launch(
        self,
        active: ActiveRun,
        facts: RunFacts,
        stage: Stage,
        attempt: int,
        seat: int | None,
        argv: tuple[str, ...],
        commit: str,
        *,
        token: str,
        prompt_file: Path,
        placement: Placement | None = None,
    ) -> StageLaunch:
        """What this child starts from, every value resolved now from the admitted config."""
        agent = active.config.agent
        reviewer = stage.reviewers[seat] if seat is not None else None
        passed = reviewer.env if reviewer is not None else stage.env
        logins = reviewer.logins if reviewer is not None else stage.logins
        owner = f"{facts.run_id}/{stage.name}#{attempt}" + (
            f"/seat{seat}" if seat is not None else ""
        )
        return StageLaunch(
            owner=owner,
            commit=commit,
            argv=argv,
            checkout=facts.worktree,
            home=self.files.home(facts.run_id),
            limits=Limits(
                timeout_ms=timeout_of(active, stage),
                max_log_lines=agent.max_log_lines,
                max_log_bytes=agent.max_log_bytes,
            ),
            variables={
                "SLOOP_RUN": facts.run_id,
                "SLOOP_TICKET": facts.ticket,
                "SLOOP_STAGE": stage.name,
                "SLOOP_ATTEMPT": str(attempt),
                "SLOOP_RUN_ATTEMPT": str(facts.attempt),
            },
            passed=(*agent.env, *passed),
            # A preset's login files sit beside the operator's, each named once.
            ro_mounts=(*agent.ro_mounts, *dict.fromkeys((*agent.logins, *logins))),
            rw_mounts=agent.rw_mounts,
            worker_socket=self.socket_path(facts.run_id),
            token=token,
            token_file=self.files.token_file(facts.run_id, token),
            token_env=agent.token_env,
            prompt_file=prompt_file,
            network=stage.network,
            placement=placement,
            overlay=self.overlay_of(facts.run_id),
        )

    async def run(
        self,
        active: ActiveRun,
        facts: RunFacts,
        stage: Stage,
        attempt: int,
        seat: int | None,
        base: tuple[str, ...],
        commit: str,
        plan: Placement,
    ) -> Ran | NotStarted:
        """Run one child under a fresh credential, from ``commit``, where ``plan`` says."""
        prompt_file, argv = self._argv(active, facts, stage, attempt, base)
        if isinstance(argv, str):
            return NotStarted(argv)
        credential = self.credentials.mint(facts.run_id, stage.name, attempt, seat)
        launch = self.launch(
            active,
            facts,
            stage,
            attempt,
            seat,
            argv,
            commit,
            token=credential.token,
            prompt_file=prompt_file,
            placement=plan,
        )
        recent = active.recent_output
        recent.clear()
        last_words = active.last_words
        last_words.clear()
        sink = self.records.sink
        budget = OutputBudget(launch.limits.max_log_lines, launch.limits.max_log_bytes)
        unflushed = 0
        stream_name = stream_of(active, stage, seat)
        try:
            parse = usages.for_execution(stream_name)  # resolved when the config loaded
        except usages.UnknownStream:
            parse = None
        usage = Usage()
        active.live = None
        active.refused_tools = ()
        # Unpriced tokens under a dollar budget are said once, in the stage's log.
        watched = active.budget.max_cost_usd is not None and stream_name in UNPRICED_STREAMS
        price = CostReader(
            active.config.pricing,
            configured_model(base, os.environ),  # for tokens the stream names no model of
            (lambda text: sink.append(facts.run_id, stage.name, attempt, "system", text, seat=seat))
            if watched
            else None,
        )

        def on_lines(stream: str, texts: list[str], split: bool) -> None:
            # One read of a pipe: its lines in order, each step once per batch.
            nonlocal unflushed
            recent.extend(texts)  # bounded; dropped lines still tell why a child failed
            last_words.heard(stream, texts, split)  # so do they for the quote of its last line
            if parse is not None and stream == "stdout":
                _read_usage(active, parse, usage, price, stream_name, texts)
            admitted = budget.admit_many(texts)
            if not admitted:
                return
            stored = texts if admitted == len(texts) else texts[:admitted]
            sink.append_many(facts.run_id, stage.name, attempt, stream, stored, split, seat)
            unflushed += sum(map(len, stored))
            if unflushed >= FLUSH_AFTER_BYTES:
                unflushed = 0
                sink.flush()

        try:
            launcher = self._launcher(plan)
            child = await launcher.start(launch, on_lines)
        except LaunchRefused as exc:
            self.credentials.revoke(facts.run_id, credential)
            return NotStarted(str(exc))
        active.child = child
        # A child still being placed (a remote executor) has no clock yet: its timeout
        # runs from its real start (the executor bounds the placement itself).
        active.child_started_monotonic = None
        active.child_timeout_ms = launch.limits.timeout_ms
        try:
            if stops_children(active.stop):  # stopped before the child was there to stop
                await child.stop()
            if await child.wait_started():
                active.child_started_monotonic = child.last_output_monotonic = time.monotonic()
            counted = self._running(plan.backend, child.node, +1)
            try:
                end = await child.end()
            finally:
                if counted:
                    self._running(plan.backend, child.node, -1)
        except LaunchRefused as exc:  # a remote child refused on its node, or its work
            return NotStarted(str(exc))
        finally:
            self.credentials.revoke(facts.run_id, credential)
            reported = self._ended(active, facts, stage.name, attempt, budget, stream_name)
        return Ran(end, reported)

    def _ended(
        self,
        active: ActiveRun,
        facts: RunFacts,
        stage: str,
        attempt: int,
        budget: OutputBudget,
        stream_name: str,
    ) -> Usage | None:
        """The child is gone: what it spent counted, its output's summary written."""
        active.child = None
        active.child_started_monotonic = active.child_timeout_ms = None
        self._after_output(facts, stage, attempt, budget)
        reported = active.live
        active.live = None
        active.spent = usages.total([active.spent, reported])
        self._count(stream_name, reported)
        return reported

    def _argv(
        self, active: ActiveRun, facts: RunFacts, stage: Stage, attempt: int, base: tuple[str, ...]
    ) -> tuple[Path, tuple[str, ...] | str]:
        """The prompt's file and the child's argv, or why it cannot start with it."""
        prompt_file, prompt = self._write_prompt(facts, stage, attempt)
        # {prompt_file}: the path the child reads, which inside the sandbox is not the host's.
        seen = str(prompt_file) if active.config.sandbox == "none" else PROMPT_PATH
        argv = prompts.expand(base, prompt, seen)
        too_long = prompts.argv_problem(base, argv)
        if too_long is not None:
            # Said before anything starts: the kernel's E2BIG would name neither cause nor fix.
            return prompt_file, f"the child was not started: {too_long.message}"
        return prompt_file, argv

    def _running(self, backend: str, node: Mapping[str, str] | None, delta: int) -> bool:
        """sloop_stage_children_running, by backend and the node's host name."""
        metrics = self.records.daemon.metrics
        if metrics is None:
            return False
        metrics.children_running.labels(backend, str((node or {}).get("host", ""))).inc(delta)
        return True

    def _launcher(self, plan: Placement) -> Launcher:
        launcher = self.launchers.get(plan.where)
        if launcher is None:
            # Stages placed on Ray by a reload: the driver is started at start-up only.
            raise LaunchRefused("the Ray executor is not running: restart the daemon to start it")
        return launcher

    def _count(self, stream_name: str, reported: Usage | None) -> None:
        metrics = self.records.daemon.metrics
        if metrics is None or reported is None:
            return
        vendor = usages.metric_vendor(stream_name)
        for kind, tokens in (
            ("input", reported.input_tokens),
            ("output", reported.output_tokens),
            ("cached", reported.cached_tokens),
        ):
            metrics.agent_tokens.labels(vendor, kind).inc(tokens)
        if reported.cost_usd is not None:
            metrics.agent_cost.labels(vendor).inc(reported.cost_usd)

    def _after_output(
        self, facts: RunFacts, stage: str, attempt: int, budget: OutputBudget
    ) -> None:
        """The one record saying what the output limits dropped; memory back after a flood."""
        summary = budget.summary()
        if summary is not None:
            self.records.sink.append(
                facts.run_id, stage, attempt, "system", summary, extra={"dropped": budget.dropped()}
            )
        if budget.seen_bytes >= TRIM_AFTER_BYTES:
            self.records.sink.flush()
            memory.release_free_heap()

    def _write_prompt(self, facts: RunFacts, stage: Stage, attempt: int) -> tuple[Path, str]:
        """The rendered prompt, written where SLOOP_PROMPT_FILE points."""
        record = self.records.store.ticket_by_id(facts.ticket)
        extra = self.records.store.row(TicketExtra, "ticket_extra", (facts.ticket,))
        assert record is not None and extra is not None
        path = self.files.run_dir(facts.run_id) / f"prompt-{stage.name}-{attempt}.md"
        prompt = prompts.render(
            stage.prompt,
            record.title,
            extra.body,
            ticket=facts.ticket,
            ticket_name=facts.ticket_name,
            run=facts.run_id,
            stage=stage.name,
            attempt=attempt,
        )
        # A stage sent back is told why (DESIGN rule 10): what the failures printed.
        told = feedback.section(feedback.of_execution(self.records, facts, stage))
        if told:
            prompt = f"{prompt.rstrip()}\n\n{told}"
        path.write_text(prompt, encoding="utf-8")
        return path, prompt


def stream_of(active: ActiveRun, stage: Stage, seat: int | None) -> str:
    """The stream a child prints, as its run was admitted (``Stage.stream_of``)."""
    return stage.stream_of(seat, active.config.agent.stream)


def said_streams(active: ActiveRun, stage: Stage) -> tuple[str, ...]:
    """Where a failed child's last line is quoted from: stderr, else stdout; only stderr
    when stdout is a CLI's JSON stream (its words reach the reason through the
    classifier: sloopd.flows.diagnosed)."""
    return ("stderr", "stdout") if stream_of(active, stage, None) == "none" else ("stderr",)


def timeout_of(active: ActiveRun, stage: Stage) -> int:
    """A child's wall-clock limit: its stage's timeout, else the agent's or command's."""
    if stage.timeout_ms is not None:
        return stage.timeout_ms
    settings = active.config.agent
    return settings.agent_timeout_ms if stage.action == "agent" else settings.command_timeout_ms


def _read_usage(
    active: ActiveRun,
    parse: usages.StreamParser,
    usage: Usage,
    price: CostReader,
    stream_name: str,
    texts: list[str],
) -> None:
    """What a batch of stdout lines says the child spent (and tools it was refused)."""
    for text in texts:
        if _parsed(parse, text, usage):
            active.live = price(usage)
            budgets.check(active)
            if stream_name == "claude" and '"permission_denials"' in text:
                refused = stream_claude.permission_denials(text) or []
                active.refused_tools = tuple(dict.fromkeys(refused))


def _parsed(parse: usages.StreamParser, line: str, usage: Usage) -> bool:
    """A parser's verdict on one line; a parser that raises reads nothing from it."""
    try:
        return parse(line, usage)
    except Exception:
        return False
