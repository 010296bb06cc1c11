"""When and what to evaluate: the models clients would use now, measured on every present
client's test split on the round cadence or the time cadence, and once more at the end.
Evaluation is a measurement: it takes no simulated time."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Generator, Mapping, Sequence

import simpy
import torch

from fedsim.config import EvaluationConfig
from fedsim.learn.data import ClientShard
from fedsim.learn.trainer import Ensemble, EvalResult, Trainer
from fedsim.results.recorder import ClientScore, Recorder
from fedsim.sim.events import EventLog

Models = torch.Tensor | Mapping[int, torch.Tensor | Ensemble]
"""What clients use to predict: one global model, or each client's own model or ensemble."""


class Evaluation:
    """The models clients use (set by the algorithm) and the measurements not yet taken."""

    def __init__(
        self,
        config: EvaluationConfig,
        last_round: int | None,
        shards: Sequence[ClientShard],
        trainer: Trainer,
        trainer_of: Callable[[int], Trainer],
        present: Collection[int],
        recorder: Recorder,
        log: EventLog,
        *,
        timing_only: bool,
    ) -> None:
        self.config = config
        self.last_round = last_round
        self.shards = shards  # client id -> its data (the test split is evaluated)
        self.trainer = trainer  # the architecture of homogeneous runs (one global model)
        self.trainer_of = trainer_of
        self.present = present
        self.recorder = recorder
        self.log = log
        self.timing_only = timing_only
        self.models: Models | None = None
        self._unevaluated: tuple[int, float, Models] | None = None
        self.rounds_completed = 0
        self._participants = 0
        self._last_evaluated_s: float | None = None
        self._last_measured: tuple[int, list[ClientScore]] | None = None

    def every_s(self, env: simpy.Environment) -> Generator[simpy.Event, None, None]:
        """Process body: measure what the clients use every ``evaluation.every_s``.

        Only what can have changed is measured again. After a measurement, nothing is logged
        before the next scheduled event (no training ends, no message arrives, nobody comes or
        goes), so the ticks before it would measure the same: the cadence wakes at the last of
        them only, writes the last measurement again there (the curve stays flat up to the
        change, as a measurement at every tick would draw it), and resumes at its first tick
        after the event. A model that takes a day to cross a slow link costs two rows, not
        21,600 evaluations, and alone on the clock the cadence ends (a run whose every client
        left, or that waits for messages lost on the way, ``World.run``)."""
        every_s = self.config.every_s
        tick = 0  # the ticks are at tick x every_s
        measured_at = None  # the log's event count at the last measurement
        while True:
            tick += 1
            yield env.timeout(max(tick * every_s - env.now, 0.0))
            if self.models is not None and self.log.emitted != measured_at:
                self._unevaluated = (self.rounds_completed, env.now, self.models)
                self.evaluate_pending()
                measured_at = self.log.emitted
            next_event_s = env.peek()
            if next_event_s == math.inf:  # nothing else is scheduled, nor ever will be
                return
            last_idle = math.ceil(next_event_s / every_s) - 1  # the last tick before it
            if self.log.emitted == measured_at and last_idle > tick:
                tick = last_idle
                yield env.timeout(max(tick * every_s - env.now, 0.0))
                self._measured_again(env.now)
                measured_at = self.log.emitted

    def round_ended(
        self, round_index: int, time_s: float, params: Models, participants: int
    ) -> None:
        """A round closed with these models: measure them on the round cadence (and after the
        last round, whenever it ends)."""
        self.models = params
        self.rounds_completed, self._participants = round_index, participants
        every_rounds = self.config.every_rounds
        if every_rounds is not None:
            self._unevaluated = (round_index, time_s, params)
            if round_index % every_rounds == 0 or round_index == self.last_round:
                self.evaluate_pending()

    def finish(self, time_s: float) -> None:
        """Measure what the cadence has not measured yet."""
        timed = self.config.every_s is not None
        if timed and self.models is not None and self._last_evaluated_s != time_s:
            self._unevaluated = (self.rounds_completed, time_s, self.models)
        self.evaluate_pending()

    def evaluate_pending(self) -> None:
        if self._unevaluated is None:
            return
        round_index, time_s, params = self._unevaluated
        self._unevaluated = None
        self._last_evaluated_s = time_s
        if self.timing_only:
            return
        clients = sorted(self.present)
        if not clients:
            return
        shards = self.shards
        if isinstance(params, torch.Tensor):
            results = self.trainer.evaluate_many(
                params, [shards[c].x_test for c in clients], [shards[c].y_test for c in clients]
            )
        else:
            clients = [c for c in clients if c in params]
            results = self._evaluate_own_models(clients, params)
        scores = [
            ClientScore(client=c, group=shards[c].group, correct=r.correct, total=r.total)
            for c, r in zip(clients, results, strict=True)
        ]
        self._last_measured = (round_index, scores)
        row = self.recorder.log_evaluation(time_s, round_index, scores, self._participants)
        self.log.emit("evaluate", round=round_index, accuracy=row["accuracy"])

    def _measured_again(self, time_s: float) -> None:
        """The last measurement written again at ``time_s``: nothing has changed since."""
        if self._last_measured is None:
            return
        round_index, scores = self._last_measured
        self._last_evaluated_s = time_s
        row = self.recorder.log_evaluation(time_s, round_index, scores, self._participants)
        self.log.emit("evaluate", round=round_index, accuracy=row["accuracy"])

    def _evaluate_own_models(
        self, clients: list[int], params: Mapping[int, torch.Tensor | Ensemble]
    ) -> list[EvalResult]:
        """Each client's own model on its test set, all clients of one architecture at once
        (an ensemble is evaluated on its own)."""
        shards = self.shards
        by_trainer: dict[Trainer, list[int]] = {}
        results: dict[int, EvalResult] = {}
        for i, c in enumerate(clients):
            model = params[c]
            if isinstance(model, Ensemble):  # a mix of models: its own pass per client
                results[i] = self.trainer_of(c).evaluate_ensemble(
                    model, shards[c].x_test, shards[c].y_test
                )
            else:
                by_trainer.setdefault(self.trainer_of(c), []).append(i)
        for trainer, members in by_trainer.items():
            group = [clients[i] for i in members]
            evaluated = trainer.evaluate_each(
                [params[c] for c in group],
                [shards[c].x_test for c in group],
                [shards[c].y_test for c in group],
            )
            results.update(zip(members, evaluated, strict=True))
        return [results[i] for i in range(len(clients))]
