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

    def every_s(self, env: simpy.Environment) -> Generator[simpy.Event, None, None]:
        """Process body: measure what the clients use every ``evaluation.every_s``, while
        anything else may still happen: alone on the clock it would tick for ever, measuring
        what can no longer change (a run whose every client left, or that waits for messages
        lost on the way, ``World.run``)."""
        while True:
            yield env.timeout(self.config.every_s)
            if self.models is not None:
                self._unevaluated = (self.rounds_completed, env.now, self.models)
                self.evaluate_pending()
            if env.peek() == math.inf:  # nothing else is scheduled, nor ever will be
                return

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
