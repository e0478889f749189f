"""Triton's model repository RPCs: RepositoryIndex, RepositoryModelLoad, RepositoryModelUnload.

Each is the REST route's call (service/http/routes/repository.py) on the same control channel to the
supervisor, with the same checks first (no repository: 404; load and unload with control off:
403) and the supervisor's answer given back as it is: a 200's body becomes the response, any
other status the error the servicer's wrapper maps to a gRPC code (service/grpc/status.py).
The wrapper also checks the API key (these methods have no exempt REST twin, so they always
need it when one is set), counts the calls by method and takes them through the door.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from inferpool.service.apierror import ApiError
from inferpool.service.errors import ErrorAnswer
from inferpool.service.grpc import inference_pb2 as pb
from inferpool.service.grpc.status import Refused
from inferpool.service.processes.supervisor_channel import Control, Message, control_for


class Repository:
    def __init__(self, control: Control | None) -> None:
        self.control = control
        """This serving process's channel to the supervisor; None without a repository."""

    async def index(self, request: pb.RepositoryIndexRequest, context: Any) -> pb.RepositoryIndexResponse:
        control = self._control(request.repository_name, changes=False)
        entries = await _ask(control, {"op": "index", "ready": request.ready})
        return pb.RepositoryIndexResponse(
            models=[
                pb.RepositoryIndexResponse.ModelIndex(
                    name=entry["name"], version=entry["version"], state=entry["state"], reason=entry.get("reason", "")
                )
                for entry in entries
            ]
        )

    async def load(self, request: pb.RepositoryModelLoadRequest, context: Any) -> pb.RepositoryModelLoadResponse:
        control = self._control(request.repository_name, changes=True)
        body = {"parameters": _parameters(request.parameters)} if request.parameters else {}
        await _ask(control, {"op": "load", "name": request.model_name, "body": body})
        return pb.RepositoryModelLoadResponse()

    async def unload(self, request: pb.RepositoryModelUnloadRequest, context: Any) -> pb.RepositoryModelUnloadResponse:
        # Its parameters are ignored, as REST ignores its body's: the one Triton's client sends,
        # unload_dependents, concerns ensembles, which InferPool does not serve.
        control = self._control(request.repository_name, changes=True)
        await _ask(control, {"op": "unload", "name": request.model_name})
        return pb.RepositoryModelUnloadResponse()

    def _control(self, repository_name: str, changes: bool) -> Control:
        control = control_for(self.control, changes)
        # REST has no way to name a repository; a name here is refused rather than ignored, so
        # that a client addressing another server's repository learns it at once.
        if repository_name:
            raise ApiError(
                400,
                f"repository_name {repository_name!r}: this server has one model repository; leave it empty",
                "repository_name",
            )
        return control


async def _ask(control: Control, message: Message) -> Any:
    """The body of the supervisor's 200; any other answer raised as it is."""
    answer = await control.ask(message)
    if answer["status"] != 200:
        raise Refused(ErrorAnswer(answer["status"], str(answer["body"].get("error", ""))))
    return answer["body"]


def _parameters(parameters: Mapping[str, pb.ModelRepositoryParameter]) -> dict[str, Any]:
    """The load's parameters as REST's body carries them (what tritonclient.http sends): the
    values as they are, a bytes one (a file's content) in base64, since the channel is JSON."""
    found: dict[str, Any] = {}
    for key, parameter in parameters.items():
        choice = parameter.WhichOneof("parameter_choice")
        value = None if choice is None else getattr(parameter, choice)
        found[key] = base64.b64encode(value).decode() if isinstance(value, bytes) else value
    return found
