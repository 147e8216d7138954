"""Typed errors of the pipeline: bad inputs are reported, never guessed around."""

from __future__ import annotations

from autoswitch.base.errors import AutoswitchError


class PipelineError(AutoswitchError):
    code = "PIPELINE_ERROR"


class InputNotFound(PipelineError):
    code = "PIPELINE_INPUT_NOT_FOUND"


class MalformedInput(PipelineError):
    """A row that does not parse or lacks a required field; the job stops instead of dropping it."""

    code = "PIPELINE_MALFORMED_INPUT"


class SparkJobFailed(PipelineError):
    code = "PIPELINE_SPARK_JOB_FAILED"
