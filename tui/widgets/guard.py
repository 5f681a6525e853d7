"""Keep the dashboard alive when one of its own handlers raises.

Textual ends the whole app on any exception that escapes a message handler, and the message
loop of the widget that raised stops for good. An operator watching a fleet loses more from a
dashboard that exits than from one view that failed to draw once, so the app, the views and
the modals catch what escapes their handlers and open the error window instead.
"""

from __future__ import annotations

from typing import Any

from textual.worker import Worker, WorkerState


class GuardedPump:
    """Mixin for the app, the views and the modals: an exception escaping one of their
    handlers opens the error window (`app.show_unexpected`) and the loop goes on.

    Only once the app has said it is ready (`app.guard_errors`): an error while the dashboard
    is still starting ends it as usual, with the traceback.
    """

    async def _dispatch_message(self, message: Any) -> None:
        try:
            await super()._dispatch_message(message)  # type: ignore[misc]
        except Exception as error:
            app = self.app  # type: ignore[attr-defined]
            if not getattr(app, "guard_errors", False):
                raise
            handler = getattr(message, "handler_name", type(message).__name__)
            app.show_unexpected(f"{type(self).__name__}.{handler}", error)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # a worker's own try/except reports what it expects; what escaped it is a bug, and
        # workers started with exit_on_error=False would otherwise fail without a word
        app = self.app  # type: ignore[attr-defined]
        if (
            event.state == WorkerState.ERROR
            and event.worker.error is not None
            and getattr(app, "guard_errors", False)
        ):
            app.show_unexpected(
                f"the background task {event.worker.name or event.worker.group}", event.worker.error
            )
