"""What every BenchMARL peer script here sets the same way: a timing run on the CPU with nothing else on."""

import tempfile


def timing_config(cfg, max_n_frames: int):
    """BenchMARL's ExperimentConfig with evaluation, loggers, checkpoints and rendering off, all on the CPU."""
    cfg.max_n_frames = max_n_frames
    cfg.loggers = []
    cfg.evaluation = False
    cfg.checkpoint_interval = 0
    cfg.create_json = False
    cfg.render = False
    cfg.train_device = cfg.sampling_device = cfg.buffer_device = "cpu"
    cfg.save_folder = tempfile.mkdtemp()
    return cfg
