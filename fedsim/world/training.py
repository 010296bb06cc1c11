"""Real trainings, run when their simulated compute time is over and batched across clients
where the trainer's engine trains several at once (vmap, stacked)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedsim.learn.trainer import Distillation, Trainer, TrainResult


@dataclass(eq=False)
class QueuedTraining:
    """A training whose compute time is running; ``result`` is set once it has run."""

    trainer: Trainer
    params: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    steps: int
    seed: int
    prox_center: torch.Tensor | None
    prox_mu: float
    distill: Distillation | None
    correction: torch.Tensor | None
    result: TrainResult | None = None

    def batches_with(self, other: QueuedTraining) -> bool:
        """Same trainer and options (the prox center, the correction and the distillation
        targets may differ), so one train_many runs both."""
        same_distill = (
            self.distill is other.distill
            if self.distill is None
            else self.distill.batches_with(other.distill)
        )
        return (
            self.trainer is other.trainer
            and (self.prox_center is None) == (other.prox_center is None)
            and self.prox_mu == other.prox_mu
            and same_distill
            and (self.correction is None) == (other.correction is None)
        )


class TrainingQueue:
    """Trainings whose compute time is running, in the order they started. A training runs
    when its time is over, or earlier, batched with another client's; work dropped before it
    ran (a dropout, a deadline) costs nothing."""

    def __init__(self) -> None:
        self._jobs: dict[QueuedTraining, None] = {}  # an ordered set

    def __len__(self) -> int:
        return len(self._jobs)

    def add(self, job: QueuedTraining) -> None:
        self._jobs[job] = None

    def discard(self, job: QueuedTraining) -> None:
        """The training will never be needed (unless it already ran, batched with another)."""
        self._jobs.pop(job, None)

    def result(self, job: QueuedTraining) -> TrainResult:
        """The training's result, run now (with its partners) unless it ran already."""
        return job.result if job.result is not None else self._run(job)

    def _run(self, due: QueuedTraining) -> TrainResult:
        """Run a training whose compute time is over, with the queued ones it batches with.

        Partners share the trainer and the training options but for the prox center, the
        correction and the distillation targets; they are taken only where the trainer's
        engine trains them all at once (``batched``): a loop gains nothing by running them
        early, and a task cancelled later would waste them.
        """
        batch = [due]
        if due.trainer.engine_for(2).batched:
            batch = [job for job in self._jobs if job.batches_with(due)]
        engine = due.trainer.engine_for(len(batch))
        for job in batch:
            del self._jobs[job]
        results = due.trainer.train_many(
            [job.params for job in batch],
            [(job.x, job.y) for job in batch],
            steps=[job.steps for job in batch],
            seeds=[job.seed for job in batch],
            engine=engine.name,
            prox_center=[job.prox_center for job in batch] if due.prox_center is not None else None,
            prox_mu=due.prox_mu,
            distill=[job.distill for job in batch] if due.distill is not None else None,
            correction=[job.correction for job in batch] if due.correction is not None else None,
        )
        for job, result in zip(batch, results, strict=True):
            job.result = result
        return results[batch.index(due)]
