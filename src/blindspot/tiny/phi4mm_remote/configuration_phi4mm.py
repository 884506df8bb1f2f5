"""Phi4MMConfig for the tiny Phi-4-multimodal: the fields of the checkpoint's own remote-code config
that vLLM's `phi4mm` model reads (written here: the hub's file cannot be fetched offline)."""

from transformers import PretrainedConfig


class Phi4MMConfig(PretrainedConfig):
    model_type = "phi4mm"
    keys_to_ignore_at_inference = ("past_key_values",)

    def __init__(
        self,
        vocab_size=200064,
        hidden_size=3072,
        intermediate_size=8192,
        num_hidden_layers=32,
        num_attention_heads=24,
        num_key_value_heads=8,
        hidden_act="silu",
        max_position_embeddings=131072,
        original_max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        rope_scaling=None,
        partial_rotary_factor=0.75,
        tie_word_embeddings=True,
        bos_token_id=199999,
        eos_token_id=199999,
        pad_token_id=199999,
        embd_layer="default",
        img_processor=None,
        audio_processor=None,
        vision_lora=None,
        speech_lora=None,
        attention_bias=False,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.hidden_act = hidden_act
        self.max_position_embeddings = max_position_embeddings
        self.original_max_position_embeddings = original_max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.rope_scaling = rope_scaling
        self.partial_rotary_factor = partial_rotary_factor
        self.embd_layer = embd_layer
        self.img_processor = img_processor
        self.audio_processor = audio_processor
        self.vision_lora = vision_lora
        self.speech_lora = speech_lora
        self.attention_bias = attention_bias
        super().__init__(
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
