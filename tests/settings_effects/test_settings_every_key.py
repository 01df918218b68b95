"""Every key of Settings has a test in this folder that changes it and sees the effect.

Adding a key to ``gliding/config/settings.py`` fails this test until the key's effect test is
written and listed here.
"""

from __future__ import annotations

import importlib

import pytest

from gliding.config.loader import settings_keys

PACKAGE = "tests.settings_effects"

EFFECT_TESTS: dict[str, list[str]] = {
    "data_dir": ["test_settings_general.test_data_dir_is_where_the_archive_lands",
                 "test_settings_general.test_data_dir_default_is_dot_gliding_in_the_cwd",
                 "test_settings_general.test_data_dir_from_the_cli_environment"],
    "log_level": ["test_settings_general.test_log_level_warning_drops_info_lines",
                  "test_settings_general.test_log_level_error_drops_warnings_too",
                  "test_settings_general.test_log_level_debug_keeps_info_lines"],
    "log_format": [
        "test_settings_general.test_log_level_info_and_format_json_give_json_lines_of_the_whole_job",
        "test_settings_general.test_log_format_console_from_the_config_file_is_for_people",
        "test_settings_general.test_log_format_json_from_the_config_file"],
    "llm.model": ["test_settings_llm.test_llm_model_is_used_when_the_task_names_none"],
    "llm.timeout_s": ["test_settings_llm.test_llm_timeout_s_makes_a_slow_hosted_call_fail_fast",
                      "test_settings_llm.test_llm_timeout_s_long_enough_lets_a_slow_call_finish"],
    "llm.stream": ["test_settings_llm_stream.test_llm_stream_on_by_default_streams_with_the_usage",
                   "test_settings_llm_stream.test_llm_stream_false_asks_for_the_whole_reply"],
    "llm.max_tokens": [
        "test_settings_llm_costs.test_max_tokens_default_is_4096_not_the_models_maximum",
        "test_settings_llm_costs.test_max_tokens_is_what_litellm_sends"],
    "llm.roles": ["test_settings_llm_costs.test_roles_max_tokens_caps_that_roles_calls_only",
                  "test_settings_llm_costs.test_roles_from_the_environment_is_a_json_object",
                  "test_settings_llm_faults.test_roles_model_and_fallbacks_route_that_roles_calls"],
    "llm.api_base": [
        "test_settings_llm_faults.test_api_base_is_where_hosted_calls_go_and_wins_over_litellms_variable",
        "test_settings_llm_faults.test_api_base_must_be_an_http_url"],
    "llm.api_key_env": [
        "test_settings_llm_faults.test_api_key_env_names_the_variable_whose_key_is_sent"],
    "llm.fallbacks": ["test_settings_llm_faults.test_fallbacks_answer_when_the_model_is_down"],
    "llm.retry.max_attempts": [
        "test_settings_llm_faults.test_retry_max_attempts_is_how_often_one_model_is_called"],
    "llm.retry.initial_s": [
        "test_settings_llm_faults.test_retry_initial_s_is_the_ceiling_of_the_first_wait_doubling_after"],
    "llm.retry.max_s": ["test_settings_llm_faults.test_retry_max_s_caps_a_retry_after"],
    "llm.retry.max_total_s": [
        "test_settings_llm_faults.test_retry_max_total_s_bounds_the_time_one_model_takes"],
    "llm.retry.cooldown_s": [
        "test_settings_llm_faults.test_retry_cooldown_s_skips_a_model_whose_retries_ran_out"],
    "llm.prices": [
        "test_settings_llm_costs.test_prices_cost_a_call_cached_tokens_at_the_cache_price",
        "test_settings_llm_costs.test_prices_let_a_cost_budget_through"],
    "llm.local.model_path": [
        "test_settings_llm.test_local_model_path_that_does_not_exist_is_an_llm_error_naming_it",
        "test_settings_llm.test_local_model_path_is_the_file_that_is_loaded"],
    "llm.local.n_ctx": ["test_settings_llm.test_local_n_ctx_is_the_loaded_context_window"],
    "llm.local.n_threads": [
        "test_settings_llm.test_local_n_threads_is_the_thread_count_llama_uses"],
    "llm.local.temperature": [
        "test_settings_llm.test_local_temperature_zero_is_repeatable_whatever_the_seed",
        "test_settings_llm.test_local_temperature_and_seed_sample_differently"],
    "llm.local.max_tokens": ["test_settings_llm.test_local_max_tokens_caps_the_completion",
                             "test_settings_llm.test_local_temperature_zero_is_repeatable_whatever_the_seed"],
    "llm.local.seed": ["test_settings_llm.test_local_temperature_and_seed_sample_differently"],
    "tools.read_page_lines": [
        "test_settings_tools.test_read_page_lines_sets_the_page_read_file_returns"],
    "tools.read_page_chars": [
        "test_settings_tools.test_read_page_chars_bounds_the_page_and_lines_are_whole_below_it"],
    "tools.grep_max_matches": [
        "test_settings_tools.test_grep_max_matches_caps_the_matches_grep_returns"],
    "tools.env_allow": ["test_settings_tools.test_env_allow_is_the_list_of_variables_bash_sees"],
    "tools.web.allow": ["test_settings_web.test_web_allow_admits_what_the_guard_refuses"],
    "tools.web.max_bytes": ["test_settings_web.test_web_max_bytes_cuts_the_body"],
    "tools.web.timeout_s": ["test_settings_web.test_web_timeout_s_bounds_a_fetch"],
    "tools.web.max_redirects": ["test_settings_web.test_web_max_redirects_bounds_the_hops"],
    "tools.web.user_agent": ["test_settings_web.test_web_user_agent_is_what_servers_see"],
    "tools.web.search.provider": [
        "test_settings_web.test_web_search_provider_offers_web_search"],
    "tools.web.search.url": ["test_settings_web.test_web_search_url_is_the_service_asked"],
    "tools.web.search.timeout_s": [
        "test_settings_web.test_web_search_timeout_s_bounds_a_search"],
    "tools.sandbox": ["test_settings_tools.test_sandbox_decides_whether_a_command_sees_the_host"],
    "tools.network": ["test_settings_tools.test_network_lets_a_sandboxed_command_connect"],
    "tools.allow_home_dot_workspaces": [
        "test_settings_tools.test_allow_home_dot_workspaces_admits_a_workspace_in_a_home_dot_directory"],
    "tools.toolchain.auto": [
        "test_settings_toolchain.test_toolchain_auto_mounts_what_the_callers_path_resolves_to"],
    "tools.toolchain.mounts": [
        "test_settings_toolchain.test_toolchain_mounts_are_read_only_paths_every_command_sees"],
    "tools.toolchain.allow": [
        "test_settings_toolchain.test_toolchain_allow_admits_a_tasks_mounts"],
    "tools.limits.cpu_s": [
        "test_settings_tools.test_limits_cpu_s_kills_a_process_past_its_cpu_seconds"],
    "tools.limits.memory_mb": [
        "test_settings_tools.test_limits_memory_mb_bounds_what_a_process_may_allocate"],
    "tools.limits.processes": [
        "test_settings_tools.test_limits_processes_bounds_how_many_a_command_runs_at_once"],
    "tools.limits.file_size_mb": [
        "test_settings_tools.test_limits_file_size_mb_bounds_the_files_a_command_writes"],
    "tools.bash.timeout_s": ["test_settings_tools.test_bash_timeout_s_kills_a_slow_command"],
    "tools.bash.max_output_bytes": [
        "test_settings_tools.test_bash_max_output_bytes_is_what_stays_in_memory"],
    "tools.bash.archive_max_bytes": [
        "test_settings_tools.test_bash_archive_max_bytes_bounds_the_kept_output"],
    "scheduler.max_corrections": [
        "test_settings_scheduler.test_max_corrections_bounds_how_often_ca_sends_da_back"],
    "scheduler.max_cycles": ["test_settings_scheduler.test_max_cycles_bounds_the_pdca_cycles"],
    "scheduler.simple_goal_max_words": [
        "test_settings_scheduler.test_simple_goal_max_words_picks_the_auto_pipeline"],
    "scheduler.max_parallel": [
        "test_settings_scheduler.test_max_parallel_bounds_the_step_sessions_that_run_at_once"],
    "scheduler.loop_limit": [
        "test_settings_scheduler.test_loop_limit_is_how_often_one_call_may_come_in_a_row",
        "test_settings_scheduler.test_loop_limit_of_one_is_refused"],
    "context.tokenizer": [
        "test_settings_context.test_tokenizer_is_the_encoding_the_job_counts_prompt_tokens_with",
        "test_settings_context.test_tokenizer_unknown_falls_back_to_4_characters_a_token"],
    "context.cache_breakpoints": [
        "test_settings_context.test_cache_breakpoints_is_how_many_marks_each_model_call_gets"],
    "context.tool_result_iri.threshold": [
        "test_settings_context.test_threshold_decides_whether_the_model_sees_the_result_or_its_summary",
        "test_settings_context.test_threshold_archived_result_reads_back_byte_exact_in_the_same_job"],
    "context.tool_result_iri.preview_size": [
        "test_settings_context.test_preview_size_bounds_the_summary_the_model_sees"],
    "context.window.target_tokens": [
        "test_settings_context.test_target_tokens_smaller_compacts_sooner_and_keeps_prompts_smaller"],
    "context.window.high_water": [
        "test_settings_context.test_high_water_higher_lets_the_prompt_grow_further_before_compacting"],
    "context.window.low_water": [
        "test_settings_context.test_low_water_lower_compacts_further_down"],
    "context.window.max_tokens": [
        "test_settings_context.test_max_tokens_is_the_ceiling_a_huge_reply_is_cut_to"],
    "context.window.max_messages": [
        "test_settings_context.test_max_messages_bounds_the_live_messages"],
    "context.window.keep_recent": [
        "test_settings_context.test_keep_recent_is_how_many_messages_a_compaction_leaves"],
    "context.window.whole_below": [
        "test_settings_context.test_whole_below_keeps_a_small_session_whole_and_saves_once_it_grows"],
    "context.summaries.budget_tokens": [
        "test_settings_context.test_budget_tokens_bounds_the_history_block"],
    "context.summaries.beta": [
        "test_settings_context.test_beta_0_forgets_the_relevant_old_turn_the_default_keeps",
        "test_settings_context.test_beta_in_a_session_keeps_the_turn_the_focus_is_about"],
    "context.summaries.w_recency": [
        "test_settings_context.test_w_recency_high_makes_age_outweigh_relevance"],
    "context.summaries.w_cost": [
        "test_settings_context.test_w_cost_high_makes_the_most_expensive_turn_go_first"],
    "context.summaries.line_chars": [
        "test_settings_context.test_line_chars_bounds_every_l1_line"],
    "context.summaries.facts_budget_tokens": [
        "test_settings_context.test_facts_budget_tokens_keeps_a_used_fact_in_the_prompt_or_not"],
    "context.prefetch.enabled": [
        "test_settings_context.test_prefetch_enabled_warms_the_sources_the_next_step_may_need"],
    "context.prefetch.budget_tokens": [
        "test_settings_context.test_prefetch_budget_tokens_bounds_the_lines_the_working_set_quotes"],
    "context.prefetch.max_sources": [
        "test_settings_context.test_prefetch_max_sources_bounds_the_sources_the_working_set_quotes"],
    "context.prefetch.lines_per_source": [
        "test_settings_context."
        "test_prefetch_lines_per_source_bounds_the_lines_quoted_from_one_source"],
    "memory.blackboard.url": [
        "test_settings_memory.test_blackboard_url_is_the_endpoint_a_job_writes_its_nodes_to",
        "test_settings_memory.test_blackboard_url_default_is_the_embedded_store_in_the_data_dir"],
    "memory.vectors.enabled": [
        "test_settings_memory.test_vectors_enabled_false_recalls_without_loading_an_embedder",
        "test_settings_memory."
        "test_vectors_enabled_loads_the_packaged_embedder_at_the_first_recall_in_the_precision_set"],
    "memory.vectors.url": [
        "test_settings_memory.test_vectors_url_unreachable_logs_and_falls_back_to_the_exact_index",
        "test_settings_memory.test_vectors_collection_is_the_collection_open_knowledge_asks_qdrant_for"],
    "memory.vectors.collection": [
        "test_settings_memory.test_vectors_collection_is_the_collection_open_knowledge_asks_qdrant_for",
        "test_settings_memory.test_vectors_collection_that_qdrant_would_refuse_is_a_config_error"],
    "memory.vectors.precision": [
        "test_settings_memory."
        "test_vectors_enabled_loads_the_packaged_embedder_at_the_first_recall_in_the_precision_set"],
    "memory.recall.budget_tokens": [
        "test_settings_memory.test_recall_budget_tokens_bounds_recall_and_kg_search_answers",
        "test_settings_memory.test_recall_budget_tokens_larger_recalls_more"],
    "context.summaries.model_written": [
        "test_settings_summaries.test_model_written_summary_is_the_turns_l1_line_and_the_tool_never_sees_it",
        "test_settings_summaries.test_model_written_false_offers_no_summary_argument"],
    "memory.recall.briefing_tokens": [
        "test_settings_memory.test_briefing_tokens_zero_leaves_the_blackboard_out_of_every_system_prompt",
        "test_settings_memory.test_briefing_tokens_positive_briefs_each_role_within_it"],
    "memory.coherence.enabled": [
        "test_settings_memory.test_coherence_enabled_runs_the_jobs_directory_and_false_leaves_it_out"],
    "memory.coherence.lease_s": [
        "test_settings_memory.test_coherence_lease_s_is_how_long_a_cache_trusts_a_line"],
    "mcp.servers": [
        "test_settings_mcp.test_mcp_servers_from_the_config_file_become_tool_groups",
        "test_settings_mcp.test_mcp_servers_from_the_environment_is_a_json_object"],
    "mcp.timeout_s": ["test_settings_mcp.test_mcp_timeout_s_is_how_long_a_call_may_take"],
    "mcp.startup_timeout_s": [
        "test_settings_mcp.test_mcp_startup_timeout_s_is_how_long_a_server_may_take_to_start"],
    "mcp.max_result_bytes": [
        "test_settings_mcp.test_mcp_max_result_bytes_caps_the_text_a_call_returns"],
    "mcp.task_pass_env": [
        "test_settings_mcp.test_mcp_task_pass_env_names_what_a_task_server_may_take"],
    "bus.url": ["test_settings_bus.test_bus_url_is_the_broker_a_jobs_events_travel_through"],
    "bus.connect_timeout_s": [
        "test_settings_bus."
        "test_connect_timeout_s_is_how_long_a_broker_that_never_answers_is_waited_for"],
    "bus.keepalive_s": ["test_settings_bus.test_keepalive_s_is_the_keep_alive_the_broker_is_told"],
    "bus.reconnect_max_s": [
        "test_settings_bus.test_reconnect_max_s_bounds_the_wait_between_reconnect_tries"],
    "bus.max_buffer": [
        "test_settings_bus."
        "test_max_buffer_is_what_a_subscription_holds_before_it_holds_the_bus_back"],
    "bus.auth": [
        "test_settings_bus.test_auth_decides_whether_a_plain_message_from_anyone_is_believed"],
    "bus.key_file": ["test_settings_bus.test_key_file_is_the_key_a_process_signs_with"],
    "bus.max_message_bytes": [
        "test_settings_bus.test_max_message_bytes_is_the_largest_message_sent_or_taken"],
    "bus.username": [
        "test_settings_bus.test_username_and_password_file_are_the_brokers_credentials"],
    "bus.password_file": [
        "test_settings_bus.test_username_and_password_file_are_the_brokers_credentials"],
    "bus.ca_file": [
        "test_settings_bus.test_ca_file_is_the_ca_a_tls_brokers_certificate_is_checked_against"],
    "daemon.heartbeat_s": [
        "test_settings_workers.test_heartbeat_s_is_how_often_a_worker_says_it_is_alive"],
    "daemon.lease_s": [
        "test_settings_workers.test_lease_s_is_how_long_a_silent_workers_work_stays_with_it"],
    "hooks.run": [
        "test_settings_hooks.test_run_hooks_run_at_their_points_and_a_before_tool_hook_refuses_a_call",
        "test_settings_hooks.test_run_default_has_no_hooks_and_the_call_runs",
        "test_settings_hooks.test_run_compaction_hooks_run_around_each_compaction",
        "test_settings_hooks.test_run_a_resumed_job_runs_no_hook_again_for_the_calls_it_replays"],
    "hooks.allow_task": [
        "test_settings_hooks.test_allow_task_true_runs_a_task_files_hooks",
        "test_settings_hooks.test_allow_task_default_false_logs_a_task_files_hooks_and_runs_none"],
    "tools.snapshots": [
        "test_settings_snapshots.test_snapshots_default_true_keeps_each_step_for_a_fork",
        "test_settings_snapshots.test_snapshots_false_keeps_none_and_a_fork_is_refused"],
    "approvals.ask": [
        "test_settings_approvals.test_ask_default_nothing_runs_every_call_unasked",
        "test_settings_approvals.test_ask_everything_waits_for_each_call_and_an_approved_one_runs"],
    "approvals.allow": [
        "test_settings_approvals.test_allow_rules_let_their_calls_run_unasked"],
    "approvals.timeout_s": [
        "test_settings_approvals.test_timeout_s_denies_an_unanswered_call_and_the_agent_is_told"],
    "traces.endpoint": [
        "test_settings_traces.test_endpoint_gets_the_jobs_span_tree_with_token_attributes",
        "test_settings_traces.test_endpoint_default_sends_nothing",
        "test_settings_traces.test_endpoint_must_be_an_http_url"],
    "daemon.agents": [
        "test_settings_workers."
        "test_agents_decides_whether_workers_or_the_jobs_own_process_run_its_roles"],
    "daemon.host": [
        "test_settings_daemon.test_host_is_the_address_the_api_listens_on",
        "test_settings_daemon.test_host_that_is_not_loopback_prints_a_warning"],
    "daemon.port": ["test_settings_daemon.test_port_is_where_the_api_listens"],
    "daemon.socket": [
        "test_settings_daemon.test_socket_also_serves_the_api_on_a_private_unix_socket"],
    "daemon.max_jobs": ["test_settings_daemon.test_max_jobs_is_how_many_jobs_run_at_once"],
}


def test_every_settings_key_has_an_effect_test() -> None:
    keys = {".".join(path) for path in settings_keys()}

    assert sorted(keys - set(EFFECT_TESTS)) == [], "keys without an effect test"
    assert sorted(set(EFFECT_TESTS) - keys) == [], "effect tests for keys that no longer exist"


@pytest.mark.parametrize("key", sorted(EFFECT_TESTS))
def test_the_listed_effect_tests_exist(key: str) -> None:
    for name in EFFECT_TESTS[key]:
        module, function = name.split(".")
        assert callable(getattr(importlib.import_module(f"{PACKAGE}.{module}"), function, None)), \
            name
