/*
 * Shared CUnit runner for every unit-test program: each test file defines
 * its suites with CU_add_suite/CU_add_test inside add_suites(), then
 * CU_RUN_MAIN() gives it a main that runs them in basic mode, prints
 * CUnit's summary lines and exits non-zero on any failure.
 */
#ifndef CU_RUN_H
#define CU_RUN_H

#include <CUnit/Basic.h>
#include <stdio.h>

#define CU_RUN_MAIN(add_suites)                                          \
	int main(void)                                                   \
	{                                                                \
		if (CU_initialize_registry() != CUE_SUCCESS)             \
			return 2;                                        \
		if (add_suites() != 0) {                                 \
			fprintf(stderr, "suite setup failed: %s\n",      \
				CU_get_error_msg());                     \
			CU_cleanup_registry();                           \
			return 2;                                        \
		}                                                        \
		CU_basic_set_mode(CU_BRM_VERBOSE);                       \
		CU_basic_run_tests();                                    \
		unsigned int fails = CU_get_number_of_failures() +       \
				     CU_get_number_of_tests_failed();    \
		CU_cleanup_registry();                                   \
		return fails ? 1 : 0;                                    \
	}

#endif
